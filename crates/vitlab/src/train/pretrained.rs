//! Fine-tuning: a classifier's weights from pretrained ones (`init.from`) and
//! linear probing (`init.freeze`).

use std::path::Path;

use burn::module::Module;

use super::predict::checkpoint_file;
use crate::models::finetune::adapt;
use crate::models::weights::{apply, collect, group, read_any, read_safetensors, to_native, Layout};
use crate::models::Vit;
use crate::tensor_file::TensorMap;
use crate::{Error, Result};

/// Loads the weights `from` names (a vitlab run directory or checkpoint: its
/// weight average when it kept one, else its trained weights; or a state dict in
/// safetensors or `torch.save` format, in vitlab's, timm's or the paper code's
/// layout) into `model`, fitted to it as [`adapt`] does; the head starts anew when
/// the class count differs, or when a vitlab checkpoint's class names are not
/// `classes`. Returns the model and a line for the log saying what was loaded
/// and what changed.
pub fn init_from(model: Vit, from: &Path, classes: &[String]) -> Result<(Vit, String)> {
    if !from.exists() {
        return Err(Error::config("init.from", format!("{} does not exist", from.display())));
    }
    let file = checkpoint_file(from)?;
    let (source, what, labels) = read_weights(&file)?;
    let target = collect(&model);
    let prefix = usize::from(model.has_class_token());
    let new_labels = labels.is_some_and(|l| l != classes);
    let (tensors, adapted) = adapt(source, &target, prefix, new_labels, &file)?;
    let model = apply(model, &tensors, &file)?;
    let mut note = format!("init: {what} from {}", file.display());
    if let Some((old, new)) = adapted.pos_embed {
        note.push_str(&format!("; position embeddings resampled from a {old}x{old} to a {new}x{new} patch grid (bicubic)"));
    }
    if !adapted.head_reset.is_empty() {
        note.push_str(&format!(
            "; {} newly initialised ({})",
            adapted.head_reset.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", "),
            if new_labels { "other classes than the checkpoint's" } else { "another class count" }
        ));
    }
    Ok((model, note))
}

/// The tensors of a weights file in vitlab's layout, what they are, and the class
/// names a vitlab checkpoint was trained on.
fn read_weights(file: &Path) -> Result<(TensorMap, String, Option<Vec<String>>)> {
    // A state dict `torch.save` wrote is not safetensors: read_any tells them apart.
    let (map, meta) = match read_safetensors(file) {
        Ok(read) => read,
        Err(_) => (read_any(file)?, Default::default()),
    };
    if meta.get("format").is_some_and(|f| f == super::checkpoint::FORMAT) {
        let (which, what) = if map.keys().any(|k| k.starts_with("ema.")) {
            ("ema", "the weight average (EMA)")
        } else {
            ("model", "the trained weights")
        };
        let classes = meta.get("classes").and_then(|c| serde_json::from_str(c).ok());
        return Ok((group(&map, which), format!("{what} of a vitlab checkpoint"), classes));
    }
    let layout = Layout::detect(&map);
    Ok((to_native(map, layout, file)?, format!("{} weights", layout.name()), None))
}

/// Stops training everything but the classification head (`head_hidden`,
/// `head_bn`, `head`): linear probing. burn's `freeze` keeps the frozen
/// parameters out of the autodiff graph, so no gradient is computed for them.
pub fn freeze_trunk(mut m: Vit) -> Vit {
    m.patch_embed = m.patch_embed.freeze();
    m.embed_norm = m.embed_norm.freeze();
    m.cls_token = m.cls_token.freeze();
    m.pos_embed = m.pos_embed.freeze();
    m.blocks = m.blocks.freeze();
    m.norm = m.norm.freeze();
    m.map = m.map.freeze();
    m
}
