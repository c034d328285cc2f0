//! Tiny-ImageNet-200: `wnids.txt` (the class ids), `train/<wnid>/images/*.JPEG`
//! (500 per class), `val/images/*.JPEG` labelled by `val/val_annotations.txt`
//! (`file<TAB>wnid<TAB>box...`). The unlabelled `test/` split is not read.
//! Class order = sorted wnids (as an image folder over `train/` would give);
//! the evaluation split is called `val`.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use super::decode::{common_size, decode_all, images_in, pack};
use super::types::{DataFormat, Decoded, OpenOptions};
use crate::{Error, Result};

pub(crate) fn read(root: &Path, options: &OpenOptions) -> Result<Decoded> {
    let wnids_path = root.join("wnids.txt");
    let text = fs::read_to_string(&wnids_path).map_err(|e| Error::io(&wnids_path, e))?;
    let mut wnids: Vec<String> = text.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect();
    wnids.sort();
    wnids.dedup();
    if wnids.is_empty() {
        return Err(Error::data(&wnids_path, "lists no class ids"));
    }
    let index: HashMap<&str, u32> = wnids.iter().enumerate().map(|(i, w)| (w.as_str(), i as u32)).collect();

    let mut train_files = Vec::new();
    let mut train_labels = Vec::new();
    for (i, w) in wnids.iter().enumerate() {
        let dir = root.join("train").join(w).join("images");
        if !dir.is_dir() {
            return Err(Error::data(&dir, format!("missing class folder for {w} (listed in wnids.txt)")));
        }
        let files = images_in(&dir, "class folder")?;
        train_labels.extend(std::iter::repeat_n(i as u32, files.len()));
        train_files.extend(files);
    }

    let ann = root.join("val").join("val_annotations.txt");
    if !ann.is_file() {
        return Err(Error::data(&ann, "missing split: no val/val_annotations.txt"));
    }
    let text = fs::read_to_string(&ann).map_err(|e| Error::io(&ann, e))?;
    let mut val_files = Vec::new();
    let mut val_labels = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut parts = line.split('\t');
        let (Some(file), Some(wnid)) = (parts.next(), parts.next()) else {
            return Err(Error::data(&ann, format!("line {}: expected file<TAB>wnid", n + 1)));
        };
        let Some(&label) = index.get(wnid.trim()) else {
            return Err(Error::data(&ann, format!("line {}: class {wnid:?} is not in wnids.txt", n + 1)));
        };
        if file.contains('/') || file.contains('\\') || file.starts_with('.') {
            return Err(Error::data(&ann, format!("line {}: bad file name {file:?}", n + 1)));
        }
        val_files.push(root.join("val").join("images").join(file.trim()));
        val_labels.push(label);
    }
    if val_files.is_empty() {
        return Err(Error::data(&ann, "lists no images"));
    }
    let threads = options.thread_count();
    let train_imgs = decode_all(&train_files, threads)?;
    let val_imgs = decode_all(&val_files, threads)?;
    let (hw, note) = common_size(train_imgs.iter().chain(&val_imgs), options.image_size);
    let mut notes: Vec<String> = note.into_iter().collect();
    if root.join("test").is_dir() {
        notes.push("test/ has no labels and is not read; val/ is the evaluation split".into());
    }
    Ok(Decoded {
        format: DataFormat::TinyImagenet,
        train: pack(train_imgs, train_labels, wnids.clone(), hw),
        test: Some(pack(val_imgs, val_labels, wnids, hw)),
        test_split: "val".into(),
        coarse: None,
        notes,
    })
}
