//! `vitlab data preview`: a grid of training images as the loader delivers them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use vitlab::config::ExperimentConfig;
use vitlab::data::{open_with, OpenOptions};

/// Images per grid column.
const ROWS: usize = 8;

pub fn preview(
    path: Option<PathBuf>,
    config: &Path,
    set: &[String],
    out: &Path,
    count: usize,
    epoch: u64,
    open: &OpenOptions,
) -> vitlab::Result<()> {
    if count == 0 {
        return Err(vitlab::Error::usage("--count", "must be at least 1"));
    }
    let c = ExperimentConfig::load(Some(config), set)?;
    let path = path.unwrap_or_else(|| PathBuf::from(&c.data.path));
    let ds = open_with(&path, open)?;
    let (images, labels) = vitlab::train::preview::preview(Arc::new(ds.train), &c, count, epoch)?;
    let [n, ch, h, w] = images.shape[..] else { unreachable!("preview returns NCHW") };
    let per = ch * h * w;
    // Column j holds images j*ROWS.. (the grid writer's layout); pad the last column.
    let columns: Vec<_> = (0..n.div_ceil(ROWS))
        .map(|j| {
            let mut data = vec![1.0f32; ROWS * per];
            let from = j * ROWS;
            let to = (from + ROWS).min(n);
            data[..(to - from) * per].copy_from_slice(&images.data[from * per..to * per]);
            vitlab::tensor_file::HostTensor::new(vec![ROWS, ch, h, w], data)
        })
        .collect();
    vitlab::data::grid::write_image_grid(out, &columns)?;
    println!(
        "{} ({n} training images of epoch {epoch}, {} under [augment] of {}):",
        out.display(),
        path.display(),
        config.display()
    );
    for (i, label) in labels.iter().enumerate() {
        println!("  row {} column {}: {label}", i % ROWS + 1, i / ROWS + 1);
    }
    Ok(())
}
