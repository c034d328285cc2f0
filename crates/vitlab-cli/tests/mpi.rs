//! `mpiexec -n 2 vitlab train` end to end (feature `mpi`; CI runs it against Debian's
//! Open MPI): two processes train the model one process trains, rank 0 alone writes
//! the run and it resumes; a rank that stops answering ends the job within the
//! watchdog's timeout.
#![cfg(feature = "mpi")]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vitlab::models::weights::read_safetensors;

/// A 2-block ViT on 256 generated 16-px images, plain SGD (whose update shows any
/// error in the gradients' scale), 6 steps of 32 images.
const RUN: &[&str] = &[
    "--set",
    "data.path=synthetic",
    "--set",
    "data.synthetic_train=256",
    "--set",
    "data.synthetic_test=32",
    "--set",
    "data.synthetic_size=16",
    "--set",
    "data.val_size=64",
    "--set",
    "data.workers=1",
    "--set",
    "model.image_size=16",
    "--set",
    "model.patch_size=4",
    "--set",
    "model.depth=2",
    "--set",
    "model.dim=32",
    "--set",
    "model.mlp_dim=64",
    "--set",
    "model.heads=4",
    "--set",
    "batch_size=32",
    "--set",
    "optim.name=sgd",
    "--set",
    "optim.lr=0.1",
    "--set",
    "optim.momentum=0.9",
    "--set",
    "schedule.warmup_epochs=0",
    "--set",
    "tensorboard=false",
];

/// `mpiexec -n N` with what Open MPI needs here (root, more ranks than cores on small
/// machines); MPICH's takes neither flag.
fn mpiexec(n: usize) -> Command {
    let version = Command::new("mpiexec").arg("--version").output().expect("mpiexec on PATH (CI installs openmpi-bin)");
    let mut c = Command::new("mpiexec");
    let version = String::from_utf8_lossy(&version.stdout).to_lowercase();
    if version.contains("open mpi") || version.contains("openrte") || version.contains("open-mpi") {
        c.args(["--allow-run-as-root", "--oversubscribe"]);
    }
    c.args(["-n", &n.to_string(), env!("CARGO_BIN_EXE_vitlab")]);
    c
}

fn train_args(out: &Path, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = ["train", "--quiet", "--out", &out.display().to_string()].iter().map(|s| s.to_string()).collect();
    a.extend(RUN.iter().chain(extra).map(|s| s.to_string()));
    a
}

fn largest_difference(a: &Path, b: &Path) -> f32 {
    let (a, b) = (read_safetensors(a).unwrap().0, read_safetensors(b).unwrap().0);
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    a.iter().flat_map(|(k, t)| t.data.iter().zip(&b[k].data).map(|(x, y)| (x - y).abs())).fold(0f32, f32::max)
}

#[test]
fn two_processes_train_the_model_one_trains_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    let single = Command::new(env!("CARGO_BIN_EXE_vitlab")).args(train_args(&one, &["--set", "epochs=1"])).output().unwrap();
    assert!(single.status.success(), "{}", String::from_utf8_lossy(&single.stderr));
    // Stopped after 4 steps, then resumed to the end of the epoch, on 2 ranks.
    let first = mpiexec(2).args(train_args(&two, &["--set", "epochs=1", "--set", "max_steps=4"])).output().unwrap();
    let err = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success(), "{err}");
    assert!(err.contains("rank 0 of 2: pid") && err.contains("rank 1 of 2: pid"), "{err}");
    let resumed =
        mpiexec(2).args(["train", "--quiet", "--resume", &two.display().to_string(), "--set", "max_steps=0"]).output().unwrap();
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    // One summary on stdout (rank 0's), one row per step in steps.csv.
    assert_eq!(String::from_utf8_lossy(&resumed.stdout).matches("\"exit_cause\"").count(), 1);
    let steps = std::fs::read_to_string(two.join("steps.csv")).unwrap();
    assert_eq!(steps.lines().count(), 1 + 6, "{steps}");
    let d = largest_difference(&one.join("checkpoints/latest.safetensors"), &two.join("checkpoints/latest.safetensors"));
    assert!(d < 2e-5, "2 ranks (stopped and resumed) end {d:e} away from one process");
}

#[test]
fn a_stopped_rank_ends_the_job_within_the_peer_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = mpiexec(2)
        .args(train_args(&dir.path().join("r"), &["--set", "epochs=1000", "--peer-timeout", "2"]))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Rank 1's pid from its start line (found anywhere in a line: mpiexec may join
    // the ranks' output), then SIGSTOP it once the ranks are training.
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let pid = lines.by_ref().map_while(Result::ok).find_map(|l| {
        let pid = l.split("rank 1 of 2: pid ").nth(1).map(|r| r.split_whitespace().next().unwrap().to_string());
        seen.push(l);
        pid
    });
    let pid = pid.unwrap_or_else(|| panic!("rank 1 did not name its pid; stderr:\n{}", seen.join("\n")));
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>().join("\n"));
    std::thread::sleep(Duration::from_secs(3));
    assert!(Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    let stopped = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if stopped.elapsed() > Duration::from_secs(60) {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
            let _ = child.kill();
            panic!("the job did not end within 60 s of a rank's SIGSTOP");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = Command::new("kill").args(["-KILL", &pid]).status();
    let err = rest.join().unwrap();
    // An error (1), not "diverged" (3).
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("a peer did not answer within 2 s"), "{err}");
}

/// An error on one rank alone (rank 0's run directory cannot be created here) ends
/// the job at once instead of leaving the other rank waiting for the peer timeout.
#[test]
fn an_error_on_one_rank_ends_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, "not a folder").unwrap();
    let started = Instant::now();
    let o = mpiexec(2).args(train_args(&blocker.join("run"), &["--peer-timeout", "120"])).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("rank 0 of 2") && err.contains("aborting every rank"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(60), "took {:?}", started.elapsed());
}
