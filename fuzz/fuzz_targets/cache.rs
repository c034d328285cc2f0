//! The decoded-dataset cache reader.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use vitlab::data::cache;

fuzz_target!(|data: &[u8]| {
    let p = Path::new("fuzz-input.vitlab-cache");
    if let Ok(ds) = cache::read_from(data, data.len() as u64, p, None) {
        // Whatever it accepts must be self-consistent.
        for (_, s) in ds.splits() {
            assert_eq!(s.pixels.len(), s.len() * s.image_bytes());
            assert!(s.labels.iter().all(|&l| (l as usize) < s.classes.len()));
        }
    }
});
