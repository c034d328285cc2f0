//! The CIFAR parsers: binary records, python pickles (batches and meta),
//! archives, and the pickle reader itself. The first byte picks the parser.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use vitlab::data::cifar;
use vitlab::tensor_file::{numpy, pickle};

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let p = Path::new("fuzz-input");
    match which % 8 {
        0 => drop(cifar::parse_binary_batch(rest, false, p)),
        1 => drop(cifar::parse_binary_batch(rest, true, p)),
        2 => drop(cifar::parse_python_batch(rest, false, p)),
        3 => drop(cifar::parse_python_batch(rest, true, p)),
        4 => drop(cifar::parse_python_meta(rest, which & 8 != 0, p)),
        5 => drop(cifar::parse_archive(rest, p)),
        _ => {
            if let Ok(v) = pickle::parse(rest) {
                let _ = numpy::ndarray_u8(&v);
                if let Some(d) = v.get("data") {
                    let _ = numpy::ndarray_u8(d);
                }
            }
        }
    }
});
