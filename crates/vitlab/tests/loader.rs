//! The batch loader: the same batches for any number of workers (against a plain
//! reference), resizing, and the resize-then-crop and wrapped epochs an unpaired
//! (CycleGAN) run's input uses.

use std::sync::Arc;

use vitlab::data::loader::{Loader, LoaderConfig, Rng};
use vitlab::data::{Augment, ImageSet, Normalize};

/// The loader's augmentation written the plain way, pixel by pixel.
fn reference_batch(set: &ImageSet, order: &[usize], from: usize, cfg: &LoaderConfig, epoch: u64) -> Vec<f32> {
    let (mean, std) = cfg.normalize.mean_std();
    let s = cfg.image_size;
    // The source is `load` px (the set's size: this reference does not resize).
    let load = if cfg.load_size == 0 { s } else { cfg.load_size };
    assert_eq!((set.height, set.width), (load, load));
    let mut out = Vec::new();
    for (pos, &idx) in order.iter().enumerate().skip(from).take(cfg.batch_size) {
        let mut rng = Rng::keyed(&[cfg.seed, epoch, pos as u64, 0x4155_4755]);
        let pad = cfg.augment.crop_padding as isize;
        // Crop offsets in [-pad, load - s + pad].
        let slack = load - s + 2 * pad as usize;
        let (dy, dx) =
            if slack > 0 { (rng.below(slack + 1) as isize - pad, rng.below(slack + 1) as isize - pad) } else { (0, 0) };
        let hf = cfg.augment.hflip > 0.0 && rng.uniform() < cfg.augment.hflip;
        let vf = cfg.augment.vflip > 0.0 && rng.uniform() < cfg.augment.vflip;
        let img = set.image(idx);
        let mut o = vec![0f32; 3 * s * s];
        for c in 0..3 {
            for y in 0..s {
                for x in 0..s {
                    let (sy, sx) = (y as isize + dy, x as isize + dx);
                    let v = if sy >= 0 && sx >= 0 && (sy as usize) < load && (sx as usize) < load {
                        img[c * load * load + sy as usize * load + sx as usize]
                    } else {
                        0
                    };
                    let ty = if vf { s - 1 - y } else { y };
                    let tx = if hf { s - 1 - x } else { x };
                    o[c * s * s + ty * s + tx] = v as f32 * (1.0 / (255.0 * std[c])) - mean[c] / std[c];
                }
            }
        }
        out.extend(o);
    }
    out
}

#[test]
fn loader_matches_the_plain_reference_for_any_worker_count() {
    let set = Arc::new(ImageSet::synthetic(70, 5, 12, 3));
    for augment in
        [Augment::standard(), Augment::paper(), Augment { crop_padding: 13, hflip: 1.0, vflip: 1.0, ..Augment::none() }]
    {
        let cfg = |workers| LoaderConfig {
            batch_size: 16,
            image_size: 12,
            augment: augment.clone(),
            normalize: Normalize::Cifar,
            shuffle: true,
            drop_last: false,
            workers,
            seed: 11,
            label_smoothing: 0.0,
            load_size: 0,
            epoch_images: 0,
        };
        let base: Vec<_> = Loader::new(set.clone(), (0..70).collect(), cfg(0)).unwrap().epoch(2, 0).collect();
        assert_eq!(base.len(), 5);
        let order = Loader::new(set.clone(), (0..70).collect(), cfg(0)).unwrap().order(2);
        for (b, batch) in base.iter().enumerate() {
            assert_eq!(batch.images, reference_batch(&set, &order, b * 16, &cfg(0), 2), "batch {b}, {augment:?}");
        }
        for workers in [1, 3] {
            let other: Vec<_> = Loader::new(set.clone(), (0..70).collect(), cfg(workers)).unwrap().epoch(2, 0).collect();
            assert_eq!(other, base, "{workers} workers");
        }
        let resumed: Vec<_> = Loader::new(set.clone(), (0..70).collect(), cfg(2)).unwrap().epoch(2, 3).collect();
        assert_eq!(resumed, base[3..].to_vec());
    }
}

#[test]
fn loader_resizes_to_the_output_size() {
    let set = Arc::new(ImageSet::synthetic(4, 2, 8, 1));
    let cfg = LoaderConfig {
        batch_size: 4,
        image_size: 16,
        augment: Augment::none(),
        normalize: Normalize::MinusOneOne,
        shuffle: false,
        drop_last: false,
        workers: 0,
        seed: 0,
        label_smoothing: 0.0,
        load_size: 0,
        epoch_images: 0,
    };
    let b = Loader::new(set, (0..4).collect(), cfg).unwrap().epoch(0, 0).next().unwrap();
    assert_eq!(b.shape, [4, 3, 16, 16]);
    assert!(b.images.iter().all(|v| (-1.0..=1.0).contains(v)));
}

/// Resize-then-crop (torchvision's `Resize(load)` + `RandomCrop(size)`, CycleGAN's
/// load size): every crop offset in [0, load - size] (plus any padding) is drawn,
/// the pixels are the reference's, for any worker count.
#[test]
fn loader_crops_from_the_load_size() {
    let set = Arc::new(ImageSet::synthetic(20, 2, 12, 5));
    for pad in [0, 2] {
        let cfg = |workers| LoaderConfig {
            batch_size: 5,
            image_size: 8,
            augment: Augment { crop_padding: pad, hflip: 0.5, ..Augment::none() },
            normalize: Normalize::MinusOneOne,
            shuffle: true,
            drop_last: true,
            workers,
            seed: 3,
            label_smoothing: 0.0,
            load_size: 12,
            epoch_images: 0,
        };
        let loader = Loader::new(set.clone(), (0..20).collect(), cfg(0)).unwrap();
        let order = loader.order(1);
        let base: Vec<_> = loader.epoch(1, 0).collect();
        assert_eq!(base.len(), 4);
        for (b, batch) in base.iter().enumerate() {
            assert_eq!(batch.shape, [5, 3, 8, 8]);
            assert_eq!(batch.images, reference_batch(&set, &order, b * 5, &cfg(0), 1), "pad {pad}, batch {b}");
        }
        let threaded: Vec<_> = Loader::new(set.clone(), (0..20).collect(), cfg(2)).unwrap().epoch(1, 0).collect();
        assert_eq!(threaded, base);
    }
    // A load size below the crop is refused, naming the setting.
    let bad = LoaderConfig {
        batch_size: 5,
        image_size: 16,
        augment: Augment::none(),
        normalize: Normalize::MinusOneOne,
        shuffle: true,
        drop_last: true,
        workers: 0,
        seed: 3,
        label_smoothing: 0.0,
        load_size: 12,
        epoch_images: 0,
    };
    let e = Loader::new(set, (0..20).collect(), bad).err().expect("load_size < image_size is an error").to_string();
    assert!(e.contains("load_size"), "{e}");
}

/// `epoch_images` above the sampler's length repeats the shuffled order from its
/// start (the smaller domain of an unpaired run keeps pace with the larger).
#[test]
fn an_epoch_longer_than_the_set_repeats_its_order() {
    let set = Arc::new(ImageSet::synthetic(5, 1, 4, 0));
    let cfg = LoaderConfig {
        batch_size: 4,
        image_size: 4,
        augment: Augment::none(),
        normalize: Normalize::MinusOneOne,
        shuffle: true,
        drop_last: true,
        workers: 0,
        seed: 9,
        label_smoothing: 0.0,
        load_size: 0,
        epoch_images: 13,
    };
    let loader = Loader::new(set, (0..5).collect(), cfg).unwrap();
    assert_eq!((loader.epoch_len(), loader.batches_per_epoch()), (13, 3));
    for epoch in 0..3 {
        let order = loader.order(epoch);
        assert_eq!(order.len(), 13);
        let mut first: Vec<usize> = order[..5].to_vec();
        first.sort_unstable();
        assert_eq!(first, (0..5).collect::<Vec<_>>(), "the first pass is a permutation");
        assert!((5..13).all(|i| order[i] == order[i % 5]));
        let batches: Vec<_> = loader.epoch(epoch, 0).collect();
        assert_eq!(batches.len(), 3);
        assert_eq!(batches[2].positions, 8..12);
    }
}
