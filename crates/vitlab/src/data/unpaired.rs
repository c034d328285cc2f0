//! Unpaired two-domain folders as the CycleGAN datasets are laid out:
//! `ROOT/trainA/ ROOT/trainB/ ROOT/testA/ ROOT/testB/`, images directly in
//! each. Each split is one [`super::ImageSet`] with classes `A` and `B`
//! (label 0 = domain A, 1 = domain B); [`super::Dataset::domain_indices`]
//! picks one domain. `trainA/` and `trainB/` are required; `testA/` and
//! `testB/` go together.

use std::path::Path;

use super::decode::{common_size, decode_all, images_in, pack};
use super::types::{DataFormat, Decoded, OpenOptions};
use crate::{Error, Result};

pub(crate) fn read(root: &Path, options: &OpenOptions) -> Result<Decoded> {
    for d in ["trainA", "trainB"] {
        if !root.join(d).is_dir() {
            return Err(Error::data(
                root.join(d),
                format!("missing split: an unpaired dataset needs trainA/ and trainB/ (no {d}/)"),
            ));
        }
    }
    let (ta, tb) = (root.join("testA").is_dir(), root.join("testB").is_dir());
    if ta != tb {
        let missing = if ta { "testB" } else { "testA" };
        return Err(Error::data(root.join(missing), format!("missing split: testA/ and testB/ go together (no {missing}/)")));
    }
    let threads = options.thread_count();
    let split = |a: &str, b: &str| -> Result<_> {
        let fa = images_in(&root.join(a), "domain folder")?;
        let fb = images_in(&root.join(b), "domain folder")?;
        let mut labels = vec![0u32; fa.len()];
        labels.extend(std::iter::repeat_n(1u32, fb.len()));
        let files: Vec<_> = fa.into_iter().chain(fb).collect();
        Ok((decode_all(&files, threads)?, labels))
    };
    let (train_imgs, train_labels) = split("trainA", "trainB")?;
    let test = if ta { Some(split("testA", "testB")?) } else { None };
    let all = train_imgs.iter().chain(test.iter().flat_map(|t| t.0.iter()));
    let (hw, note) = common_size(all, options.image_size);
    let classes = vec!["A".to_string(), "B".to_string()];
    let train = pack(train_imgs, train_labels, classes.clone(), hw);
    let test = test.map(|(imgs, labels)| pack(imgs, labels, classes.clone(), hw));
    Ok(Decoded {
        format: DataFormat::Unpaired,
        train,
        test,
        test_split: "test".into(),
        coarse: None,
        notes: note.into_iter().collect(),
    })
}
