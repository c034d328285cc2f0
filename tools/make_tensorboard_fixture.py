#!/usr/bin/env python3
"""Writes crates/vitlab/tests/fixtures/tensorboard/golden.tfevents with TensorBoard's own
record writer and protos (pip install tensorboard==2.20.0): the events vitlab writes, at
fixed wall times, so that the Rust test can require its writer to produce the same bytes
and its reader to read them back. The events, in order:

  1. file_version "brain.Event:2"                  (wall 1000.0, step 0)
  2. scalar "train/loss" = 2.5                       (wall 1001.0, step 1)
  3. scalar "epoch/val_acc" = 0.125, "epoch/lr" = 1e-3 in one summary (wall 1002.5, step 390)
  4. text "config" = "seed = 0\\n[model]\\nblock = \\"vit\\"" (the text plugin's layout) (wall 1003.0, step 0)
  5. image "samples" 2x3 PNG bytes b"\\x89PNG-fake"   (wall 1004.0, step 7)
  6. session_log START                               (wall 1005.0, step 391)

Also checks what it wrote with TensorBoard's event accumulator (the reader TensorBoard
itself uses), so the fixture is a file TensorBoard shows.
"""
import argparse
import os
import tempfile

from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2
from tensorboard.plugins.text import plugin_data_pb2 as text_plugin_data_pb2
from tensorboard.summary.writer.record_writer import RecordWriter


def events():
    e = []
    e.append(event_pb2.Event(wall_time=1000.0, step=0, file_version="brain.Event:2"))
    e.append(event_pb2.Event(wall_time=1001.0, step=1, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag="train/loss", simple_value=2.5)])))
    e.append(event_pb2.Event(wall_time=1002.5, step=390, summary=summary_pb2.Summary(value=[
        summary_pb2.Summary.Value(tag="epoch/val_acc", simple_value=0.125),
        summary_pb2.Summary.Value(tag="epoch/lr", simple_value=1e-3)])))
    text = 'seed = 0\n[model]\nblock = "vit"'
    meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(
        plugin_name="text", content=text_plugin_data_pb2.TextPluginData(version=0).SerializeToString()))
    tensor = tensor_pb2.TensorProto(dtype="DT_STRING", string_val=[text.encode()],
                                    tensor_shape=tensor_shape_pb2.TensorShapeProto(
                                        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1)]))
    e.append(event_pb2.Event(wall_time=1003.0, step=0, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag="config", metadata=meta, tensor=tensor)])))
    image = summary_pb2.Summary.Image(height=2, width=3, colorspace=3, encoded_image_string=b"\x89PNG-fake")
    e.append(event_pb2.Event(wall_time=1004.0, step=7, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag="samples", image=image)])))
    e.append(event_pb2.Event(wall_time=1005.0, step=391, session_log=event_pb2.SessionLog(
        status=event_pb2.SessionLog.START)))
    return e


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "../crates/vitlab/tests/fixtures/tensorboard/golden.tfevents"))
    a = ap.parse_args()
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "wb") as f:
        w = RecordWriter(f)
        for ev in events():
            w.write(ev.SerializeToString())
        w.flush()
    # Read back with TensorBoard's own loaders: the raw events, then the accumulator (a copy named as TensorBoard expects).
    from tensorboard.backend.event_processing import event_file_loader
    read = [ev for ev in event_file_loader.LegacyEventFileLoader(a.out).Load()]
    assert len(read) == 6, read
    assert read[1].summary.value[0].simple_value == 2.5
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "events.out.tfevents.1000.golden"), "wb") as f, open(a.out, "rb") as g:
            f.write(g.read())
        from tensorboard.backend.event_processing import event_accumulator
        acc = event_accumulator.EventAccumulator(d, size_guidance={"scalars": 0, "images": 0, "tensors": 0})
        acc.Reload()
        assert [s.value for s in acc.Scalars("train/loss")] == [2.5]
        assert [i.width for i in acc.Images("samples")] == [3]
    print(f"wrote {a.out} ({os.path.getsize(a.out)} bytes)")


if __name__ == "__main__":
    main()
