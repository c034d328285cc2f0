//! The numpy arrays inside pickles (CIFAR's python batches): the array a
//! pickle's `numpy.core.multiarray._reconstruct` / `_frombuffer` builds.

use std::rc::Rc;

use super::pickle::{latin1, PickleError, Value};

/// A numpy uint8 array from its pickled form
/// (`numpy.core.multiarray._reconstruct` + `BUILD` state): returns the shape and the bytes.
pub fn ndarray_u8(v: &Value) -> Result<(Vec<usize>, Rc<[u8]>), PickleError> {
    let Value::Object { callable, args, state } = v else {
        return Err(PickleError::NotAnArray(format!("expected a numpy array, found a {}", v.kind())));
    };
    let (module, name) = match &**callable {
        Value::Global(m, n) if m.starts_with("numpy") => (m.clone(), n.clone()),
        Value::Global(m, n) => return Err(PickleError::NotAnArray(format!("expected a numpy array, found {m}.{n}"))),
        other => return Err(PickleError::NotAnArray(format!("expected a numpy array, found a {}", other.kind()))),
    };
    // Protocol 5: numpy._core.numeric._frombuffer(buffer, dtype, shape, order)
    let (shape, dtype, fortran, data) = match &*name {
        "_reconstruct" => {
            let Some(Value::Tuple(st)) = state.as_deref() else {
                return Err(PickleError::NotAnArray("numpy array without its state".into()));
            };
            // (version, shape, dtype, is_fortran, data)
            if st.len() != 5 {
                return Err(PickleError::NotAnArray(format!("numpy array state has {} fields, expected 5", st.len())));
            }
            (&st[1], &st[2], matches!(st[3], Value::Bool(true)), &st[4])
        }
        "_frombuffer" => {
            let Value::Tuple(a) = &**args else {
                return Err(PickleError::NotAnArray("numpy _frombuffer without arguments".into()));
            };
            if a.len() != 4 {
                return Err(PickleError::NotAnArray(format!("numpy _frombuffer has {} arguments, expected 4", a.len())));
            }
            let fortran = a[3].as_string().as_deref() == Some("F");
            (&a[2], &a[1], fortran, &a[0])
        }
        _ => return Err(PickleError::NotAnArray(format!("expected a numpy array, found {module}.{name}"))),
    };
    let shape: Vec<usize> = shape
        .as_ints()
        .filter(|s| s.iter().all(|&d| d >= 0))
        .ok_or_else(|| PickleError::NotAnArray("numpy array shape is not a tuple of sizes".into()))?
        .into_iter()
        .map(|d| d as usize)
        .collect();
    let dtype_ok = match dtype {
        Value::Object { callable, args, .. } => {
            matches!(&**callable, Value::Global(_, n) if &**n == "dtype")
                && matches!(&**args, Value::Tuple(a) if a.first().and_then(Value::as_string).as_deref() == Some("u1"))
        }
        _ => false,
    };
    if !dtype_ok {
        return Err(PickleError::NotAnArray("numpy array is not of dtype uint8".into()));
    }
    if fortran {
        return Err(PickleError::NotAnArray("numpy array is in Fortran order".into()));
    }
    let data: Rc<[u8]> = match data {
        Value::Bytes(b) => b.clone(),
        // Python 2 str data re-pickled by Python 3 arrives as latin-1 text.
        Value::Str(s) => latin1(s).ok_or_else(|| PickleError::NotAnArray("numpy array data is text outside latin-1".into()))?,
        other => return Err(PickleError::NotAnArray(format!("numpy array data is a {}", other.kind()))),
    };
    let n = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| PickleError::NotAnArray("numpy array shape overflows".into()))?;
    if n != data.len() {
        return Err(PickleError::NotAnArray(format!(
            "numpy array of shape {shape:?} has {} data bytes, expected {n}",
            data.len()
        )));
    }
    Ok((shape, data))
}
