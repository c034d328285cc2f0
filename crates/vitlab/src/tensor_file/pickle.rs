//! A small, bounded reader for Python pickles: the CIFAR "python version"
//! releases' batches (protocol 2, as written by Python 2's cPickle, and the
//! opcodes of protocols 3-5 that a re-pickled copy may use) and the main
//! pickle of PyTorch state dicts ([`super::torch`]). It builds plain
//! values (no code runs): dicts, lists, tuples, ints, byte strings, text, and
//! "objects" (a `GLOBAL` called through `REDUCE`, with the `BUILD` state), from
//! which [`ndarray_u8`] extracts a numpy uint8 array.
//!
//! Bounds: every length is checked against the bytes left in the input, the
//! stack and memo are limited, and nesting is limited, so no input makes it
//! allocate far more than its own size or recurse without end.

use std::collections::HashMap;
use std::rc::Rc;

/// A decoded pickle value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// `bytes`, and Python 2 `str` (which is bytes).
    Bytes(Rc<[u8]>),
    /// Python 3 `str` / Python 2 `unicode`.
    Str(Rc<str>),
    List(Vec<Value>),
    Tuple(Vec<Value>),
    Dict(Vec<(Value, Value)>),
    /// `module.name` as pushed by `GLOBAL` / `STACK_GLOBAL`.
    Global(Rc<str>, Rc<str>),
    /// A persistent id (`BINPERSID`), by which PyTorch files reference tensor storages.
    Persistent(Box<Value>),
    /// The result of `REDUCE` (callable applied to args), with the state set by `BUILD`.
    Object {
        callable: Box<Value>,
        args: Box<Value>,
        state: Option<Box<Value>>,
    },
}

impl Value {
    /// Looks up a key in a dict, matching either `bytes` or `str` keys.
    pub fn get(&self, key: &str) -> Option<&Value> {
        let Value::Dict(items) = self else { return None };
        items.iter().find_map(|(k, v)| match k {
            Value::Bytes(b) if &b[..] == key.as_bytes() => Some(v),
            Value::Str(s) if &**s == key => Some(v),
            _ => None,
        })
    }

    /// A list or tuple of ints.
    pub fn as_ints(&self) -> Option<Vec<i64>> {
        match self {
            Value::List(items) | Value::Tuple(items) => items
                .iter()
                .map(|v| match v {
                    Value::Int(i) => Some(*i),
                    Value::Bool(b) => Some(*b as i64),
                    _ => None,
                })
                .collect(),
            _ => None,
        }
    }

    /// A list or tuple of strings (bytes decoded as UTF-8, lossily).
    pub fn as_strings(&self) -> Option<Vec<String>> {
        match self {
            Value::List(items) | Value::Tuple(items) => items.iter().map(Value::as_string).collect(),
            _ => None,
        }
    }

    pub fn as_string(&self) -> Option<String> {
        match self {
            Value::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
            Value::Str(s) => Some(s.to_string()),
            _ => None,
        }
    }

    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Bytes(_) => "bytes",
            Value::Str(_) => "str",
            Value::List(_) => "list",
            Value::Tuple(_) => "tuple",
            Value::Dict(_) => "dict",
            Value::Global(..) => "global",
            Value::Persistent(_) => "persistent id",
            Value::Object { .. } => "object",
        }
    }
}

/// Why a pickle, or the numpy array in one, cannot be read (the caller adds the file name).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PickleError {
    #[error("truncated pickle: needs {needed} bytes at offset {offset}, {left} left")]
    Truncated { needed: usize, offset: usize, left: usize },
    #[error("truncated pickle: unterminated text line")]
    UnterminatedLine,
    #[error("pickle: {what} is not UTF-8 at offset {offset}")]
    NotUtf8 { what: &'static str, offset: usize },
    #[error("truncated pickle: no STOP opcode")]
    NoStop,
    #[error("unsupported pickle protocol {0}")]
    Protocol(u8),
    #[error("unsupported pickle opcode 0x{op:02x} at offset {offset}")]
    Opcode { op: u8, offset: usize },
    /// A limit that keeps a hostile pickle cheap was reached.
    #[error("pickle: {0}")]
    Limit(&'static str),
    /// Opcodes that do not fit together (e.g. APPEND to a dict).
    #[error("pickle: {what} at offset {offset}")]
    Malformed { what: String, offset: usize },
    /// The pickle is fine but does not hold the numpy array expected.
    #[error("{0}")]
    NotAnArray(String),
}

/// Limits that keep a hostile pickle cheap.
const MAX_STACK: usize = 1 << 20;
const MAX_MEMO: usize = 1 << 20;
const MAX_DEPTH: u32 = 64;

/// Parses one pickle. Errors are plain messages (the caller adds the file name).
pub fn parse(data: &[u8]) -> Result<Value, PickleError> {
    parse_prefix(data).map(|(v, _)| v)
}

/// Parses the pickle at the start of `data` and returns it with the number of
/// bytes it took (PyTorch's legacy files are several pickles back to back).
pub fn parse_prefix(data: &[u8]) -> Result<(Value, usize), PickleError> {
    let mut p = Parser {
        data,
        pos: 0,
        // Copies made by memo GETs and DUPs, in value nodes: a small multiple of
        // the input size, so a tiny pickle cannot clone a large list over and over.
        copy_budget: 4 * data.len() as u64 + 1024,
    };
    let v = p.run()?;
    Ok((v, p.pos))
}

struct Parser<'a> {
    data: &'a [u8],
    pos: usize,
    copy_budget: u64,
}

/// A value on the stack with its nesting depth and node count (kept up to date
/// in O(1) per opcode, so the limits cost nothing to check).
#[derive(Clone)]
struct Node {
    v: Value,
    depth: u32,
    nodes: u64,
}

enum Item {
    Mark,
    V(Node),
}

fn leaf(v: Value) -> Node {
    Node { v, depth: 0, nodes: 1 }
}

fn container(items: &[Node]) -> (u32, u64) {
    let depth = 1 + items.iter().map(|n| n.depth).max().unwrap_or(0);
    let nodes = 1 + items.iter().map(|n| n.nodes).sum::<u64>();
    (depth, nodes)
}

impl Parser<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], PickleError> {
        if n > self.data.len() - self.pos {
            return Err(PickleError::Truncated { needed: n, offset: self.pos, left: self.data.len() - self.pos });
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, PickleError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, PickleError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }

    fn u32(&mut self) -> Result<u32, PickleError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }

    fn u64(&mut self) -> Result<u64, PickleError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }

    fn len64(&mut self) -> Result<usize, PickleError> {
        usize::try_from(self.u64()?).map_err(|_| PickleError::Limit("length too large"))
    }

    fn line(&mut self) -> Result<&str, PickleError> {
        let rest = &self.data[self.pos..];
        let end = rest.iter().position(|&b| b == b'\n').ok_or(PickleError::UnterminatedLine)?;
        self.pos += end + 1;
        std::str::from_utf8(&rest[..end]).map_err(|_| PickleError::NotUtf8 { what: "text line", offset: self.pos - end - 1 })
    }

    fn utf8(&mut self, n: usize) -> Result<Value, PickleError> {
        let offset = self.pos;
        let s = std::str::from_utf8(self.take(n)?).map_err(|_| PickleError::NotUtf8 { what: "string", offset })?;
        Ok(Value::Str(s.into()))
    }

    fn run(&mut self) -> Result<Value, PickleError> {
        let mut stack: Vec<Item> = Vec::new();
        let mut memo: HashMap<u64, Node> = HashMap::new();
        macro_rules! pop {
            () => {
                match stack.pop() {
                    Some(Item::V(n)) => n,
                    Some(Item::Mark) => return Err(PickleError::Malformed { what: "unexpected mark".into(), offset: self.pos }),
                    None => return Err(PickleError::Malformed { what: "stack underflow".into(), offset: self.pos }),
                }
            };
        }
        macro_rules! push {
            ($n:expr) => {{
                let n: Node = $n;
                if stack.len() >= MAX_STACK {
                    return Err(PickleError::Limit("stack too deep"));
                }
                if n.depth > MAX_DEPTH {
                    return Err(PickleError::Limit("values nested too deeply"));
                }
                stack.push(Item::V(n));
            }};
        }
        macro_rules! top_container {
            ($at:expr, $what:expr) => {
                match stack.last_mut() {
                    Some(Item::V(n)) => n,
                    _ => return Err(PickleError::Malformed { what: format!("{} without a value", $what), offset: $at }),
                }
            };
        }
        // Pops back to the last mark, returning the values above it.
        fn pop_mark(stack: &mut Vec<Item>, pos: usize) -> Result<Vec<Node>, PickleError> {
            let m = stack
                .iter()
                .rposition(|i| matches!(i, Item::Mark))
                .ok_or(PickleError::Malformed { what: "no mark".into(), offset: pos })?;
            let items = stack.split_off(m + 1);
            stack.pop();
            Ok(items
                .into_iter()
                .filter_map(|i| match i {
                    Item::V(n) => Some(n),
                    Item::Mark => None,
                })
                .collect())
        }
        fn pairs(items: Vec<Node>) -> Vec<(Value, Value)> {
            let mut d = Vec::with_capacity(items.len() / 2);
            let mut it = items.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                d.push((k.v, v.v));
            }
            d
        }
        loop {
            let at = self.pos;
            let op = self.u8().map_err(|_| PickleError::NoStop)?;
            match op {
                0x80 => {
                    let proto = self.u8()?;
                    if proto > 5 {
                        return Err(PickleError::Protocol(proto));
                    }
                }
                0x95 => {
                    self.u64()?; // FRAME: a length hint only
                }
                b'.' => {
                    let n = pop!();
                    return Ok(n.v);
                }
                b'(' => {
                    if stack.len() >= MAX_STACK {
                        return Err(PickleError::Limit("stack too deep"));
                    }
                    stack.push(Item::Mark)
                }
                b'}' => push!(Node { v: Value::Dict(Vec::new()), depth: 1, nodes: 1 }),
                b']' => push!(Node { v: Value::List(Vec::new()), depth: 1, nodes: 1 }),
                b')' => push!(Node { v: Value::Tuple(Vec::new()), depth: 1, nodes: 1 }),
                b'N' => push!(leaf(Value::None)),
                0x88 => push!(leaf(Value::Bool(true))),
                0x89 => push!(leaf(Value::Bool(false))),
                b'K' => {
                    let v = self.u8()?;
                    push!(leaf(Value::Int(v as i64)))
                }
                b'M' => {
                    let v = self.u16()?;
                    push!(leaf(Value::Int(v as i64)))
                }
                b'J' => {
                    let v = self.u32()? as i32;
                    push!(leaf(Value::Int(v as i64)))
                }
                0x8a => {
                    // LONG1: little-endian two's complement of n bytes
                    let n = self.u8()? as usize;
                    let b = self.take(n)?;
                    if n > 8 {
                        return Err(PickleError::Malformed { what: format!("integer of {n} bytes too large"), offset: at });
                    }
                    let mut v: i64 = 0;
                    for (i, &byte) in b.iter().enumerate() {
                        v |= (byte as i64) << (8 * i);
                    }
                    if n > 0 && n < 8 && b[n - 1] & 0x80 != 0 {
                        v -= 1i64 << (8 * n);
                    }
                    push!(leaf(Value::Int(v)))
                }
                b'I' => {
                    let line = self.line()?.trim().to_string();
                    let v = match line.as_str() {
                        "00" => Value::Bool(false),
                        "01" => Value::Bool(true),
                        s => Value::Int(
                            s.parse().map_err(|_| PickleError::Malformed { what: format!("bad INT {s:?}"), offset: at })?,
                        ),
                    };
                    push!(leaf(v))
                }
                b'G' => {
                    let v = f64::from_be_bytes(self.take(8)?.try_into().unwrap());
                    push!(leaf(Value::Float(v)))
                }
                b'U' | b'C' => {
                    let n = self.u8()? as usize;
                    let b = self.take(n)?;
                    push!(leaf(Value::Bytes(b.into())))
                }
                b'T' | b'B' => {
                    let n = self.u32()? as usize;
                    let b = self.take(n)?;
                    push!(leaf(Value::Bytes(b.into())))
                }
                0x8e | 0x96 => {
                    let n = self.len64()?;
                    let b = self.take(n)?;
                    push!(leaf(Value::Bytes(b.into())))
                }
                0x8c => {
                    let n = self.u8()? as usize;
                    let v = self.utf8(n)?;
                    push!(leaf(v))
                }
                b'X' => {
                    let n = self.u32()? as usize;
                    let v = self.utf8(n)?;
                    push!(leaf(v))
                }
                0x8d => {
                    let n = self.len64()?;
                    let v = self.utf8(n)?;
                    push!(leaf(v))
                }
                b'c' => {
                    let module: Rc<str> = self.line()?.into();
                    let name: Rc<str> = self.line()?.into();
                    push!(leaf(Value::Global(module, name)))
                }
                0x93 => {
                    let name = pop!();
                    let module = pop!();
                    match (module.v, name.v) {
                        (Value::Str(m), Value::Str(n)) => push!(leaf(Value::Global(m, n))),
                        _ => return Err(PickleError::Malformed { what: "STACK_GLOBAL needs two strings".into(), offset: at }),
                    }
                }
                b'q' | b'r' | 0x94 => {
                    let i = match op {
                        b'q' => self.u8()? as u64,
                        b'r' => self.u32()? as u64,
                        _ => memo.len() as u64,
                    };
                    if memo.len() >= MAX_MEMO {
                        return Err(PickleError::Limit("memo too large"));
                    }
                    // Containers are memoised as they are now: a later GET of a
                    // list that grew afterwards would see the old contents, which
                    // the CIFAR pickles never do. Byte strings are shared, not copied.
                    let n = top_container!(at, "PUT").clone();
                    self.spend(n.nodes, at)?;
                    memo.insert(i, n);
                }
                b'h' | b'j' => {
                    let i = if op == b'h' { self.u8()? as u64 } else { self.u32()? as u64 };
                    let n = memo.get(&i).ok_or_else(|| PickleError::Malformed { what: format!("memo {i} unset"), offset: at })?;
                    let n = n.clone();
                    self.spend(n.nodes, at)?;
                    push!(n)
                }
                b'2' => {
                    let n = top_container!(at, "DUP").clone();
                    self.spend(n.nodes, at)?;
                    push!(n)
                }
                b'0' => {
                    stack.pop();
                }
                b'a' => {
                    let item = pop!();
                    let top = top_container!(at, "APPEND");
                    let Value::List(l) = &mut top.v else {
                        return Err(PickleError::Malformed { what: format!("APPEND to a {}", top.v.kind()), offset: at });
                    };
                    top.depth = top.depth.max(item.depth + 1);
                    top.nodes += item.nodes;
                    l.push(item.v);
                    if top.depth > MAX_DEPTH {
                        return Err(PickleError::Limit("values nested too deeply"));
                    }
                }
                b'e' | b'u' => {
                    let items = pop_mark(&mut stack, at)?;
                    let (depth, nodes) = container(&items);
                    let top = top_container!(at, if op == b'e' { "APPENDS" } else { "SETITEMS" });
                    top.depth = top.depth.max(depth);
                    top.nodes += nodes;
                    match (&mut top.v, op) {
                        (Value::List(l), b'e') => l.extend(items.into_iter().map(|n| n.v)),
                        (Value::Dict(d), b'u') if items.len() % 2 == 0 => d.extend(pairs(items)),
                        (v, _) => {
                            return Err(PickleError::Malformed {
                                what: format!("opcode '{}' on a {}", op as char, v.kind()),
                                offset: at,
                            })
                        }
                    }
                    if top.depth > MAX_DEPTH {
                        return Err(PickleError::Limit("values nested too deeply"));
                    }
                }
                b's' => {
                    let v = pop!();
                    let k = pop!();
                    let top = top_container!(at, "SETITEM");
                    let Value::Dict(d) = &mut top.v else {
                        return Err(PickleError::Malformed { what: format!("SETITEM on a {}", top.v.kind()), offset: at });
                    };
                    top.depth = top.depth.max(1 + k.depth.max(v.depth));
                    top.nodes += k.nodes + v.nodes;
                    d.push((k.v, v.v));
                    if top.depth > MAX_DEPTH {
                        return Err(PickleError::Limit("values nested too deeply"));
                    }
                }
                b't' | b'l' | b'd' => {
                    let items = pop_mark(&mut stack, at)?;
                    let (depth, nodes) = container(&items);
                    let v = match op {
                        b't' => Value::Tuple(items.into_iter().map(|n| n.v).collect()),
                        b'l' => Value::List(items.into_iter().map(|n| n.v).collect()),
                        _ if items.len() % 2 == 0 => Value::Dict(pairs(items)),
                        _ => return Err(PickleError::Malformed { what: "DICT with an odd number of items".into(), offset: at }),
                    };
                    push!(Node { v, depth, nodes })
                }
                0x85..=0x87 => {
                    let k = (op - 0x84) as usize;
                    let mut items = Vec::with_capacity(k);
                    for _ in 0..k {
                        items.push(pop!());
                    }
                    items.reverse();
                    let (depth, nodes) = container(&items);
                    push!(Node { v: Value::Tuple(items.into_iter().map(|n| n.v).collect()), depth, nodes })
                }
                b'R' | 0x81 => {
                    // REDUCE: callable(*args); NEWOBJ: cls.__new__(cls, *args)
                    let args = pop!();
                    let callable = pop!();
                    // Python 3 pickles `bytes` at protocol 2 as `_codecs.encode(text, "latin1")`.
                    if let Some(b) = codecs_encode(&callable.v, &args.v) {
                        push!(leaf(Value::Bytes(b)));
                        continue;
                    }
                    // `collections.OrderedDict()` (PyTorch state dicts): a dict that SETITEMS fills.
                    if is_empty_ordered_dict(&callable.v, &args.v) {
                        push!(Node { v: Value::Dict(Vec::new()), depth: 1, nodes: 1 });
                        continue;
                    }
                    let (depth, nodes) = container(&[args.clone_shallow(), callable.clone_shallow()]);
                    push!(Node {
                        v: Value::Object { callable: Box::new(callable.v), args: Box::new(args.v), state: None },
                        depth,
                        nodes,
                    })
                }
                b'b' => {
                    let st = pop!();
                    let top = top_container!(at, "BUILD");
                    // A dict's state is its attributes (a state dict's `_metadata`): not kept.
                    if matches!(top.v, Value::Dict(_)) {
                        continue;
                    }
                    let Value::Object { state, .. } = &mut top.v else {
                        return Err(PickleError::Malformed { what: format!("BUILD on a {}", top.v.kind()), offset: at });
                    };
                    top.depth = top.depth.max(st.depth + 1);
                    top.nodes += st.nodes;
                    *state = Some(Box::new(st.v));
                    if top.depth > MAX_DEPTH {
                        return Err(PickleError::Limit("values nested too deeply"));
                    }
                }
                b'Q' => {
                    // BINPERSID: the id is kept for the caller to resolve.
                    let id = pop!();
                    push!(Node { v: Value::Persistent(Box::new(id.v)), depth: id.depth + 1, nodes: id.nodes + 1 })
                }
                other => return Err(PickleError::Opcode { op: other, offset: at }),
            }
        }
    }

    fn spend(&mut self, nodes: u64, at: usize) -> Result<(), PickleError> {
        if nodes > self.copy_budget {
            return Err(PickleError::Malformed { what: "too many copies of memoised values".into(), offset: at });
        }
        self.copy_budget -= nodes;
        Ok(())
    }
}

fn is_empty_ordered_dict(callable: &Value, args: &Value) -> bool {
    matches!(callable, Value::Global(m, n) if &**m == "collections" && &**n == "OrderedDict")
        && matches!(args, Value::Tuple(a) if a.is_empty())
}

/// `_codecs.encode(s, "latin1")` (or `"latin-1"`) evaluated: the bytes of `s`.
fn codecs_encode(callable: &Value, args: &Value) -> Option<Rc<[u8]>> {
    let Value::Global(m, n) = callable else { return None };
    if &**m != "_codecs" || &**n != "encode" {
        return None;
    }
    match args {
        Value::Tuple(a) if a.len() == 2 => match (&a[0], &a[1]) {
            (Value::Str(s), Value::Str(enc)) if matches!(&**enc, "latin1" | "latin-1" | "iso-8859-1") => latin1(s),
            _ => None,
        },
        _ => None,
    }
}

pub(super) fn latin1(s: &str) -> Option<Rc<[u8]>> {
    let bytes: Option<Vec<u8>> = s.chars().map(|c| u8::try_from(c as u32).ok()).collect();
    bytes.map(Into::into)
}

impl Node {
    /// Depth and size only (for computing a parent's), without copying the value.
    fn clone_shallow(&self) -> Node {
        Node { v: Value::None, depth: self.depth, nodes: self.nodes }
    }
}
