//! TensorBoard event files: `RUN_DIR/tensorboard/events.out.tfevents.*`, read by
//! `tensorboard --logdir runs/` as PyTorch's `SummaryWriter` files are.
//!
//! A file is a sequence of TFRecords (`u64` length, masked CRC-32C of the
//! length, the bytes, masked CRC-32C of the bytes), each an `Event` protocol
//! buffer (tensorflow/core/util/event.proto, summary.proto) encoded by prost
//! from the message definitions below, which keep the proto's field numbers.
//! The first event names the file version; then scalars (`simple_value`),
//! images (PNG) and text (the text plugin's string tensor). A resumed run opens
//! a new file that starts with `SessionLog.START` at the step it continues
//! from: TensorBoard then drops what earlier files logged at that step or later
//! (written after the checkpoint the run resumed from), so no step is shown twice.
//!
//! `tools/make_tensorboard_fixture.py` writes the same events with TensorBoard's
//! own writer; the tests require the same bytes.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use prost::Message;

use crate::{Error, Result};

#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    #[prost(int64, tag = "2")]
    pub step: i64,
    #[prost(oneof = "What", tags = "3, 5, 7")]
    pub what: Option<What>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum What {
    #[prost(string, tag = "3")]
    FileVersion(String),
    #[prost(message, tag = "5")]
    Summary(Summary),
    #[prost(message, tag = "7")]
    SessionLog(SessionLog),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SessionLog {
    /// 1: START.
    #[prost(int32, tag = "1")]
    pub status: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Summary {
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<Value>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Value {
    #[prost(string, tag = "1")]
    pub tag: String,
    #[prost(message, optional, tag = "9")]
    pub metadata: Option<SummaryMetadata>,
    #[prost(oneof = "Kind", tags = "2, 4, 8")]
    pub kind: Option<Kind>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Kind {
    #[prost(float, tag = "2")]
    SimpleValue(f32),
    #[prost(message, tag = "4")]
    Image(Image),
    #[prost(message, tag = "8")]
    Tensor(TensorProto),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Image {
    #[prost(int32, tag = "1")]
    pub height: i32,
    #[prost(int32, tag = "2")]
    pub width: i32,
    #[prost(int32, tag = "3")]
    pub colorspace: i32,
    #[prost(bytes = "vec", tag = "4")]
    pub encoded_image_string: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SummaryMetadata {
    #[prost(message, optional, tag = "1")]
    pub plugin_data: Option<PluginData>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PluginData {
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    #[prost(bytes = "vec", tag = "2")]
    pub content: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    /// 7: DT_STRING.
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    #[prost(message, optional, tag = "2")]
    pub tensor_shape: Option<TensorShape>,
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub string_val: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShape {
    #[prost(message, repeated, tag = "2")]
    pub dim: Vec<Dim>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Dim {
    #[prost(int64, tag = "1")]
    pub size: i64,
}

const START: i32 = 1;
const DT_STRING: i32 = 7;

fn masked_crc(bytes: &[u8]) -> u32 {
    let c = crc32c::crc32c(bytes);
    c.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// One TFRecord: length, its masked CRC, the data, its masked CRC.
fn record(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

/// A scalar summary value.
pub fn scalar(tag: &str, value: f64) -> Value {
    Value { tag: tag.into(), metadata: None, kind: Some(Kind::SimpleValue(value as f32)) }
}

/// A text summary value (TensorBoard's text plugin: a one-element string tensor).
pub fn text(tag: &str, text: &str) -> Value {
    let meta = SummaryMetadata { plugin_data: Some(PluginData { plugin_name: "text".into(), content: Vec::new() }) };
    let tensor = TensorProto {
        dtype: DT_STRING,
        tensor_shape: Some(TensorShape { dim: vec![Dim { size: 1 }] }),
        string_val: vec![text.as_bytes().to_vec()],
    };
    Value { tag: tag.into(), metadata: Some(meta), kind: Some(Kind::Tensor(tensor)) }
}

/// An image summary value from PNG bytes of an RGB image.
pub fn image(tag: &str, png: Vec<u8>, height: usize, width: usize) -> Value {
    let image = Image { height: height as i32, width: width as i32, colorspace: 3, encoded_image_string: png };
    Value { tag: tag.into(), metadata: None, kind: Some(Kind::Image(image)) }
}

/// Appends events to one event file. Write errors are kept (the first one) for
/// the loop to report once, as the CSV logs' are: a full disk must not end training.
pub struct EventWriter {
    path: PathBuf,
    file: BufWriter<File>,
    error: Option<String>,
}

impl EventWriter {
    /// A new event file in `dir` (created), starting with the file version and,
    /// when resuming at `resume_step`, `SessionLog.START` there.
    pub fn create(dir: &Path, resume_step: Option<u64>) -> Result<EventWriter> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let now = wall_time();
        let host = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()).unwrap_or_else(|| "localhost".into());
        // Unique per process and file: several files of one run sort by their start.
        let path = dir.join(format!("events.out.tfevents.{}.{host}.{}.vitlab", now as u64, std::process::id()));
        let path = (0..)
            .map(|i| if i == 0 { path.clone() } else { path.with_extension(format!("vitlab{i}")) })
            .find(|p| !p.exists())
            .expect("a free name");
        let file = File::create(&path).map_err(|e| Error::io(&path, e))?;
        let mut w = EventWriter { path, file: BufWriter::new(file), error: None };
        w.write_event(&Event { wall_time: now, step: 0, what: Some(What::FileVersion("brain.Event:2".into())) });
        if let Some(step) = resume_step {
            w.write_event(&Event {
                wall_time: now,
                step: step as i64,
                what: Some(What::SessionLog(SessionLog { status: START })),
            });
        }
        w.flush();
        match w.error.take() {
            Some(e) => Err(Error::data(&w.path, e)),
            None => Ok(w),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `values` as one summary at `step`.
    pub fn summary(&mut self, step: u64, values: Vec<Value>) {
        if !values.is_empty() {
            let what = Some(What::Summary(Summary { value: values }));
            self.write_event(&Event { wall_time: wall_time(), step: step as i64, what });
        }
    }

    pub fn write_event(&mut self, event: &Event) {
        if self.error.is_none() {
            if let Err(e) = self.file.write_all(&record(&event.encode_to_vec())) {
                self.error = Some(format!("cannot write TensorBoard events: {e}"));
            }
        }
    }

    pub fn flush(&mut self) {
        if self.error.is_none() {
            if let Err(e) = self.file.flush() {
                self.error = Some(format!("cannot write TensorBoard events: {e}"));
            }
        }
    }

    /// The first write error, once.
    pub fn take_error(&mut self) -> Option<String> {
        self.error.take().map(|e| format!("{}: {e}", self.path.display()))
    }
}

fn wall_time() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// Reads every event of an event file, checking both CRCs of every record.
pub fn read_events(path: &Path) -> Result<Vec<Event>> {
    let mut bytes = Vec::new();
    File::open(path).and_then(|mut f| f.read_to_end(&mut bytes)).map_err(|e| Error::io(path, e))?;
    let bad = |m: String| Error::data(path, m);
    let mut events = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let head = bytes.get(pos..pos + 12).ok_or_else(|| bad(format!("truncated record header at byte {pos}")))?;
        let len = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        if masked_crc(&head[..8]) != u32::from_le_bytes(head[8..12].try_into().expect("4 bytes")) {
            return Err(bad(format!("corrupt record length at byte {pos} (CRC mismatch)")));
        }
        let n = usize::try_from(len)
            .ok()
            .filter(|&n| n <= bytes.len())
            .ok_or_else(|| bad(format!("record of {len} bytes at byte {pos}")))?;
        let data = bytes.get(pos + 12..pos + 12 + n).ok_or_else(|| bad(format!("truncated record at byte {pos}")))?;
        let crc = bytes.get(pos + 12 + n..pos + 16 + n).ok_or_else(|| bad(format!("truncated record at byte {pos}")))?;
        if masked_crc(data) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err(bad(format!("corrupt record at byte {pos} (CRC mismatch)")));
        }
        events.push(Event::decode(data).map_err(|e| bad(format!("record at byte {pos} is not an Event: {e}")))?);
        pos += 16 + n;
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn golden() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tensorboard/golden.tfevents")
    }

    /// The events of tools/make_tensorboard_fixture.py.
    fn fixture_events() -> Vec<Event> {
        let summary = |wall_time, step, value| Event { wall_time, step, what: Some(What::Summary(Summary { value })) };
        vec![
            Event { wall_time: 1000.0, step: 0, what: Some(What::FileVersion("brain.Event:2".into())) },
            summary(1001.0, 1, vec![scalar("train/loss", 2.5)]),
            summary(1002.5, 390, vec![scalar("epoch/val_acc", 0.125), scalar("epoch/lr", 1e-3)]),
            summary(1003.0, 0, vec![text("config", "seed = 0\n[model]\nblock = \"vit\"")]),
            summary(1004.0, 7, vec![image("samples", b"\x89PNG-fake".to_vec(), 2, 3)]),
            Event { wall_time: 1005.0, step: 391, what: Some(What::SessionLog(SessionLog { status: START })) },
        ]
    }

    #[test]
    fn events_are_the_bytes_tensorboards_own_writer_makes() {
        let want = std::fs::read(golden()).unwrap();
        let ours: Vec<u8> = fixture_events().iter().flat_map(|e| record(&e.encode_to_vec())).collect();
        assert_eq!(ours, want);
        assert_eq!(read_events(&golden()).unwrap(), fixture_events());
    }

    #[test]
    fn a_writer_starts_with_the_version_and_a_resume_marker_and_the_reader_checks_crcs() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(dir.path(), Some(40)).unwrap();
        w.summary(41, vec![scalar("train/loss", 1.5)]);
        w.summary(42, vec![]);
        w.flush();
        let path = w.path().to_path_buf();
        assert!(path.file_name().unwrap().to_string_lossy().starts_with("events.out.tfevents."));
        let events = read_events(&path).unwrap();
        assert_eq!(events.len(), 3, "an empty summary writes nothing");
        assert_eq!(events[0].what, Some(What::FileVersion("brain.Event:2".into())));
        assert_eq!((events[1].step, &events[1].what), (40, &Some(What::SessionLog(SessionLog { status: START }))));
        assert_eq!(events[2].step, 41);
        // A second writer in the same folder writes another file.
        let other = EventWriter::create(dir.path(), None).unwrap();
        assert_ne!(other.path(), path);
        // One flipped byte is a CRC error naming the file.
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 6;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let e = read_events(&path).unwrap_err().to_string();
        assert!(e.contains("CRC mismatch") && e.contains("events.out.tfevents"), "{e}");
    }
}
