//! Where a burn module visitor or mapper is: the dotted path of the parameter
//! it is at (`blocks.3.attn.qkv.weight`), from the `enter_module` /
//! `exit_module` calls every visitor receives. Struct fields and `Vec` indices
//! are path segments; the variant level of a module enum is not, so a block's
//! keys do not depend on which kind of block it is (`blocks.0.norm1.weight` for
//! every variant that has a `norm1`).

/// The path stack of a visitor or mapper.
#[derive(Clone, Debug, Default)]
pub struct ParamPath {
    /// One entry per entered module; `None` for an enum's variant level.
    stack: Vec<Option<String>>,
}

impl ParamPath {
    /// Call from `enter_module(name, container_type)`.
    pub fn enter(&mut self, name: &str, container_type: &str) {
        self.stack.push((!container_type.starts_with("Enum:")).then(|| name.to_string()));
    }

    /// Call from `exit_module`.
    pub fn exit(&mut self) {
        self.stack.pop();
    }

    /// The path's segments, outermost first.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.stack.iter().flatten().map(String::as_str)
    }

    /// The dotted key, e.g. `blocks.3.attn.qkv.weight`.
    pub fn key(&self) -> String {
        self.segments().collect::<Vec<_>>().join(".")
    }

    /// The index of the transformer block the path is in (`blocks.<i>. ...`).
    pub fn block(&self) -> Option<usize> {
        let mut s = self.segments();
        (s.next() == Some("blocks")).then(|| s.next()?.parse().ok()).flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::ParamPath;

    #[test]
    fn enum_variant_levels_are_not_part_of_the_key() {
        let mut p = ParamPath::default();
        for (name, container) in [("blocks", "Vec"), ("3", "Struct:Block"), ("Parallel", "Enum:Block"), ("norm1", "Struct:Norm")]
        {
            p.enter(name, container);
        }
        p.enter("weight", "Struct:Param");
        assert_eq!(p.key(), "blocks.3.norm1.weight");
        assert_eq!(p.block(), Some(3));
        p.exit();
        p.exit();
        p.exit();
        assert_eq!(p.key(), "blocks.3");
        p.exit();
        p.exit();
        assert_eq!((p.key(), p.block()), (String::new(), None));
    }
}
