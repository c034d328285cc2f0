//! Reads PyTorch state dicts saved with `torch.save` (`.pth`, `.pt`), without
//! Python and without running any of the file's code: both the zip format
//! (PyTorch >= 1.6: `archive/data.pkl` and one `archive/data/<key>` entry per
//! storage) and the legacy format (five pickles back to back, then the storages,
//! each as an int64 element count and its bytes), which older weight releases
//! such as pytorch-fid's `pt_inception-2015-12-05-6726825d.pth` use.
//!
//! The main pickle is read by [`super::pickle`]; tensors are
//! `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)` whose
//! storage is a persistent id `('storage', torch.FloatStorage, key, location, numel, ...)`.
//! Float storages (float32/64/16, bfloat16) become float32 [`HostTensor`]s;
//! integer tensors (BatchNorm's `num_batches_tracked`) are dropped.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use super::host::{HostTensor, TensorMap};
use super::pickle::{self, Value};
use crate::{Error, Result};

/// The first pickle of the legacy format: `torch.serialization.MAGIC_NUMBER`
/// (0x1950a86a20f9469cfc6c, a 10-byte LONG1) at protocol 2.
const LEGACY_MAGIC: [u8; 15] = [0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, b'.'];

/// Element type of a storage class.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Elem {
    F32,
    F64,
    F16,
    Bf16,
    /// Integer or boolean storages: read past, not kept.
    Other(usize),
}

impl Elem {
    fn from_class(name: &str) -> Option<Elem> {
        Some(match name {
            "FloatStorage" => Elem::F32,
            "DoubleStorage" => Elem::F64,
            "HalfStorage" => Elem::F16,
            "BFloat16Storage" => Elem::Bf16,
            "LongStorage" => Elem::Other(8),
            "IntStorage" => Elem::Other(4),
            "ShortStorage" => Elem::Other(2),
            "CharStorage" | "ByteStorage" | "BoolStorage" => Elem::Other(1),
            _ => return None,
        })
    }

    fn size(self) -> usize {
        match self {
            Elem::F32 => 4,
            Elem::F64 => 8,
            Elem::F16 | Elem::Bf16 => 2,
            Elem::Other(n) => n,
        }
    }

    fn to_f32(self, raw: &[u8]) -> Option<Vec<f32>> {
        Some(match self {
            Elem::F32 => raw.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect(),
            Elem::F64 => raw.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap()) as f32).collect(),
            Elem::F16 => raw.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            Elem::Bf16 => raw.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            Elem::Other(_) => return None,
        })
    }
}

/// Whether `bytes` look like a file `torch.save` wrote (zip or legacy pickle).
pub fn looks_like_torch(bytes: &[u8]) -> bool {
    bytes.starts_with(b"PK\x03\x04") || bytes.starts_with(&[0x80, 0x02, 0x8a])
}

/// Reads the float tensors of a state dict saved by `torch.save`.
pub fn read_state_dict(path: &Path) -> Result<TensorMap> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let bad = |m: String| Error::weights(path, m);
    if bytes.starts_with(b"PK\x03\x04") {
        read_zip(&bytes).map_err(bad)
    } else {
        read_legacy(&bytes).map_err(bad)
    }
}

/// A tensor of the main pickle, before its storage is resolved.
struct TensorRef {
    key: String,
    elem: Elem,
    offset: usize,
    size: Vec<usize>,
    stride: Vec<usize>,
}

fn read_zip(bytes: &[u8]) -> std::result::Result<TensorMap, String> {
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).map_err(|e| format!("not a PyTorch zip file: {e}"))?;
    let pkl_name = (0..zip.len())
        .filter_map(|i| zip.by_index(i).ok().map(|f| f.name().to_string()))
        .find(|n| n.ends_with("/data.pkl") && n.matches('/').count() == 1)
        .ok_or("not a PyTorch file: the zip has no <archive>/data.pkl")?;
    let prefix = pkl_name.trim_end_matches("data.pkl").to_string();
    if zip.by_name(&format!("{prefix}constants.pkl")).is_ok() || zip.by_name(&format!("{prefix}code/")).is_ok() {
        return Err("a TorchScript module, not a state dict (convert it with tools/convert_fid_inception.py)".into());
    }
    let pkl = read_entry(&mut zip, &pkl_name)?;
    let root = pickle::parse(&pkl).map_err(|e| e.to_string())?;
    let refs = tensor_refs(&root)?;
    let mut storages: HashMap<String, Vec<u8>> = HashMap::new();
    for (_, r) in &refs {
        if !storages.contains_key(&r.key) {
            let data = read_entry(&mut zip, &format!("{prefix}data/{}", r.key))?;
            storages.insert(r.key.clone(), data);
        }
    }
    assemble(refs, &storages)
}

fn read_entry(zip: &mut zip::ZipArchive<std::io::Cursor<&[u8]>>, name: &str) -> std::result::Result<Vec<u8>, String> {
    let mut f = zip.by_name(name).map_err(|e| format!("zip entry {name}: {e}"))?;
    let mut out = Vec::with_capacity(f.size() as usize);
    f.read_to_end(&mut out).map_err(|e| format!("zip entry {name}: {e}"))?;
    Ok(out)
}

fn read_legacy(bytes: &[u8]) -> std::result::Result<TensorMap, String> {
    if !bytes.starts_with(&LEGACY_MAGIC) {
        return Err("not a file torch.save wrote (neither a zip nor the legacy format's magic number)".into());
    }
    let mut pos = LEGACY_MAGIC.len();
    let mut next = |what: &str| -> std::result::Result<Value, String> {
        let (v, n) = pickle::parse_prefix(&bytes[pos..])
            .map_err(|e| format!("not a file torch.save wrote (legacy format, {what}): {e}"))?;
        pos += n;
        Ok(v)
    };
    match next("protocol version")? {
        Value::Int(1001) => {}
        v => return Err(format!("unsupported legacy protocol version {v:?}")),
    }
    next("system info")?;
    let root = next("state dict")?;
    let keys = next("storage keys")?.as_strings().ok_or("legacy file: the storage key list is not a list of strings")?;
    let refs = tensor_refs(&root)?;
    let elems: HashMap<&str, Elem> = refs.iter().map(|(_, r)| (r.key.as_str(), r.elem)).collect();
    let mut storages: HashMap<String, Vec<u8>> = HashMap::new();
    for key in keys {
        let head = bytes.get(pos..pos + 8).ok_or("legacy file: truncated storage")?;
        let numel = i64::from_le_bytes(head.try_into().unwrap());
        let elem = *elems.get(key.as_str()).ok_or_else(|| format!("legacy file: storage {key} is not referenced"))?;
        let n = usize::try_from(numel).ok().and_then(|n| n.checked_mul(elem.size())).ok_or("legacy file: bad storage size")?;
        let data = bytes.get(pos + 8..pos + 8 + n).ok_or_else(|| format!("legacy file: storage {key} is truncated"))?;
        storages.insert(key, data.to_vec());
        pos += 8 + n;
    }
    assemble(refs, &storages)
}

/// The tensors of a state dict (a dict of name -> `_rebuild_tensor_v2(...)`).
fn tensor_refs(root: &Value) -> std::result::Result<Vec<(String, TensorRef)>, String> {
    let Value::Dict(items) = root else {
        return Err("not a state dict: the file holds no dict of tensors (a whole pickled model?)".into());
    };
    let mut out = Vec::new();
    for (k, v) in items {
        let name = k.as_string().ok_or("not a state dict: a key is not a string")?;
        out.push((name.clone(), tensor_ref(v).map_err(|m| format!("entry `{name}`: {m}"))?));
    }
    Ok(out)
}

fn tensor_ref(v: &Value) -> std::result::Result<TensorRef, String> {
    let Value::Object { callable, args, .. } = v else { return Err("not a tensor".into()) };
    match &**callable {
        Value::Global(m, n) if &**m == "torch._utils" && &**n == "_rebuild_tensor_v2" => {}
        other => return Err(format!("not a plain tensor (built by {other:?})")),
    }
    let Value::Tuple(a) = &**args else { return Err("bad tensor arguments".into()) };
    if a.len() < 4 {
        return Err("bad tensor arguments".into());
    }
    let Value::Persistent(id) = &a[0] else { return Err("tensor without a storage".into()) };
    let Value::Tuple(id) = &**id else { return Err("bad storage id".into()) };
    let class = match id.get(1) {
        Some(Value::Global(_, n)) => n.to_string(),
        _ => return Err("bad storage id".into()),
    };
    let elem = Elem::from_class(&class).ok_or_else(|| format!("unsupported storage type {class}"))?;
    let key = id.get(2).and_then(Value::as_string).ok_or("bad storage key")?;
    let offset = match &a[1] {
        Value::Int(o) if *o >= 0 => *o as usize,
        _ => return Err("bad storage offset".into()),
    };
    let dims = |v: &Value| -> Option<Vec<usize>> { v.as_ints()?.into_iter().map(|i| usize::try_from(i).ok()).collect() };
    let size = dims(&a[2]).ok_or("bad tensor size")?;
    let stride = dims(&a[3]).ok_or("bad tensor stride")?;
    if size.len() != stride.len() {
        return Err("size and stride differ in length".into());
    }
    Ok(TensorRef { key, elem, offset, size, stride })
}

fn assemble(refs: Vec<(String, TensorRef)>, storages: &HashMap<String, Vec<u8>>) -> std::result::Result<TensorMap, String> {
    let mut map = TensorMap::new();
    for (name, r) in refs {
        let raw = storages.get(&r.key).ok_or_else(|| format!("entry `{name}`: storage {} is missing", r.key))?;
        let Some(values) = r.elem.to_f32(raw) else { continue };
        let n: usize = r.size.iter().product();
        let mut data = Vec::with_capacity(n);
        if n > 0 {
            // The largest element index the view touches must lie inside its storage.
            let last = r.offset + r.size.iter().zip(&r.stride).map(|(s, st)| (s - 1) * st).sum::<usize>();
            if last >= values.len() {
                return Err(format!("entry `{name}`: the view reaches past its storage"));
            }
            let mut idx = vec![0usize; r.size.len()];
            for _ in 0..n {
                let at = r.offset + idx.iter().zip(&r.stride).map(|(i, s)| i * s).sum::<usize>();
                data.push(values[at]);
                for d in (0..idx.len()).rev() {
                    idx[d] += 1;
                    if idx[d] < r.size[d] {
                        break;
                    }
                    idx[d] = 0;
                }
            }
        }
        map.insert(name, HostTensor::new(r.size, data));
    }
    Ok(map)
}
