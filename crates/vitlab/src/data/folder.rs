//! Image-folder classification datasets, as torchvision's `ImageFolder`:
//! `ROOT/<split>/<class>/*.jpg|png` (splits `train` and `test`, or `val`) or
//! `ROOT/<class>/*.jpg|png` (train only). Class order = sorted folder names
//! of the train split; labels follow it. Images are decoded to RGB; differing
//! sizes are resized (see [`super::OpenOptions::image_size`]).

use std::path::{Path, PathBuf};

use super::decode::{common_size, decode_all, images_in, list_dir, pack};
use super::types::{DataFormat, Decoded, OpenOptions};
use crate::{Error, Result};

/// Names taken as the evaluation split, in order of preference.
pub const EVAL_SPLITS: &[&str] = &["test", "val", "valid", "validation"];

pub(crate) fn read(root: &Path, options: &OpenOptions) -> Result<Decoded> {
    let entries = list_dir(root)?;
    let dirs: Vec<&(String, PathBuf, bool)> = entries.iter().filter(|e| e.2).collect();
    if dirs.is_empty() {
        return Err(Error::data(
            root,
            "not a dataset: no class folders (expected ROOT/<class>/*.jpg or ROOT/train/<class>/*.jpg)",
        ));
    }
    let has = |name: &str| dirs.iter().find(|e| e.0 == name).map(|e| e.1.clone());
    let split_like = |p: &Path| list_dir(p).map(|v| v.iter().any(|e| e.2)).unwrap_or(false);
    let eval = EVAL_SPLITS.iter().find_map(|s| has(s).filter(|p| split_like(p)).map(|p| (s.to_string(), p)));
    let train_dir = has("train").filter(|p| split_like(p));
    let mut notes = Vec::new();
    let (train_root, eval) = match (train_dir, eval) {
        (Some(t), e) => (t, e),
        (None, Some((name, _))) => {
            return Err(Error::data(
                root.join("train"),
                format!("missing split: {root:?} has a {name}/ split folder but no train/ folder"),
            ))
        }
        (None, None) => (root.to_path_buf(), None),
    };
    let classes: Vec<(String, PathBuf)> = list_dir(&train_root)?.into_iter().filter(|e| e.2).map(|e| (e.0, e.1)).collect();
    if classes.is_empty() {
        return Err(Error::data(&train_root, "no class folders"));
    }
    let names: Vec<String> = classes.iter().map(|c| c.0.clone()).collect();
    let (train_files, train_labels) = collect(&classes, &names)?;
    let (eval_files, eval_labels, eval_name) = match &eval {
        Some((name, dir)) => {
            let cls: Vec<(String, PathBuf)> = list_dir(dir)?.into_iter().filter(|e| e.2).map(|e| (e.0, e.1)).collect();
            if let Some(c) = cls.iter().find(|c| !names.contains(&c.0)) {
                return Err(Error::data(
                    &c.1,
                    format!("class folder {:?} of the {name} split has no counterpart in train/", c.0),
                ));
            }
            let (f, l) = collect(&cls, &names)?;
            (f, l, name.clone())
        }
        None => (Vec::new(), Vec::new(), "test".to_string()),
    };
    let threads = options.thread_count();
    let train_imgs = decode_all(&train_files, threads)?;
    let eval_imgs = decode_all(&eval_files, threads)?;
    let (hw, note) = common_size(train_imgs.iter().chain(&eval_imgs), options.image_size);
    notes.extend(note);
    let train = pack(train_imgs, train_labels, names.clone(), hw);
    let test = eval.is_some().then(|| pack(eval_imgs, eval_labels, names.clone(), hw));
    Ok(Decoded { format: DataFormat::ImageFolder, train, test, test_split: eval_name, coarse: None, notes })
}

/// The image files of each class folder with their labels (by name in `names`).
fn collect(classes: &[(String, PathBuf)], names: &[String]) -> Result<(Vec<PathBuf>, Vec<u32>)> {
    let mut files = Vec::new();
    let mut labels = Vec::new();
    for (name, dir) in classes {
        let label = names.iter().position(|n| n == name).unwrap_or(0) as u32;
        let imgs = images_in(dir, "class folder")?;
        labels.extend(std::iter::repeat_n(label, imgs.len()));
        files.extend(imgs);
    }
    Ok((files, labels))
}
