//! Downloads from a local HTTP server: checksums, resuming a dropped connection or
//! an earlier partial file, offline hints, archives unpacked, the catalog.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

mod common;

use common::{assert_err, err_text, opts, tmp, write_png};
use vitlab::data::download::{self, Checksum, Remote};
use vitlab::data::{open_with, DataFormat};

/// A one-file HTTP server on 127.0.0.1 with Range support. `drop_first`:
/// the first full (non-range) response sends only that many body bytes and
/// closes. Records each request's Range header ("" when none).
struct Server {
    url: String,
    ranges: Arc<Mutex<Vec<String>>>,
}

fn serve(body: Vec<u8>, drop_first: Option<usize>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/file.bin", listener.local_addr().unwrap());
    let ranges = Arc::new(Mutex::new(Vec::new()));
    let seen = ranges.clone();
    std::thread::spawn(move || {
        let mut dropped = false;
        // Bounded: a test makes a handful of requests.
        for stream in listener.incoming().take(20) {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut range = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("range: bytes=") {
                    range = v.trim().trim_end_matches('-').to_string();
                }
            }
            seen.lock().unwrap().push(range.clone());
            let start: usize = range.parse().unwrap_or(0);
            let resp = if start >= body.len() && !range.is_empty() {
                format!("HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", body.len()).into_bytes()
            } else if !range.is_empty() {
                let mut r = format!(
                    "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {start}-{}/{}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len() - 1,
                    body.len(),
                    body.len() - start
                )
                .into_bytes();
                r.extend(&body[start..]);
                r
            } else {
                let mut r =
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len()).into_bytes();
                match drop_first {
                    Some(n) if !dropped => {
                        dropped = true;
                        r.extend(&body[..n]);
                    }
                    _ => r.extend(&body),
                }
                r
            };
            let _ = stream.write_all(&resp);
            let _ = stream.flush();
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    });
    Server { url, ranges }
}

fn md5_of(b: &[u8]) -> Checksum {
    use md5::Digest;
    Checksum::Md5(md5::Md5::digest(b).iter().map(|x| format!("{x:02x}")).collect())
}

fn body(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 13 % 251) as u8).collect()
}

fn no_progress() -> impl FnMut(u64, Option<u64>) {
    |_, _| {}
}

#[test]
fn download_verifies_the_checksum() {
    let t = tmp();
    let data = body(300_000);
    let s = serve(data.clone(), None);
    let dest = t.path().join("f.bin");
    download::fetch(&s.url, &dest, &md5_of(&data), "", &mut no_progress()).unwrap();
    assert_eq!(fs::read(&dest).unwrap(), data);
    // A wrong checksum: error with both values, and the partial file is gone.
    let s = serve(data.clone(), None);
    let dest2 = t.path().join("g.bin");
    let wrong = Checksum::Md5("00000000000000000000000000000000".into());
    assert_err(download::fetch(&s.url, &dest2, &wrong, "", &mut no_progress()), "g.bin", "checksum mismatch");
    assert!(!dest2.exists() && !t.path().join("g.bin.part").exists());
}

#[test]
fn download_resumes_a_dropped_connection_with_range() {
    let t = tmp();
    let data = body(500_000);
    let s = serve(data.clone(), Some(123_456));
    let dest = t.path().join("f.bin");
    let mut calls = 0;
    download::fetch(&s.url, &dest, &md5_of(&data), "", &mut |_, _| calls += 1).unwrap();
    assert_eq!(fs::read(&dest).unwrap(), data);
    assert_eq!(*s.ranges.lock().unwrap(), vec!["".to_string(), "123456".to_string()]);
    assert!(calls > 0);
}

#[test]
fn download_resumes_a_partial_file_from_an_earlier_run() {
    let t = tmp();
    let data = body(200_000);
    let s = serve(data.clone(), None);
    let dest = t.path().join("f.bin");
    fs::write(t.path().join("f.bin.part"), &data[..77_000]).unwrap();
    download::fetch(&s.url, &dest, &md5_of(&data), "", &mut no_progress()).unwrap();
    assert_eq!(fs::read(&dest).unwrap(), data);
    assert_eq!(*s.ranges.lock().unwrap(), vec!["77000".to_string()]);
    // A .part that is already complete: the server answers 416, the file is verified.
    let s = serve(data.clone(), None);
    let dest = t.path().join("h.bin");
    fs::write(t.path().join("h.bin.part"), &data).unwrap();
    download::fetch(&s.url, &dest, &md5_of(&data), "", &mut no_progress()).unwrap();
    assert_eq!(fs::read(&dest).unwrap(), data);
}

#[test]
fn download_offline_says_where_to_put_the_file() {
    let t = tmp();
    // A port nobody listens on (bound, then closed).
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let remote = Remote {
        name: "cifar10".into(),
        url: format!("http://127.0.0.1:{port}/cifar-10-python.tar.gz"),
        file: "cifar-10-python.tar.gz".into(),
        checksum: Checksum::Md5("c58f30108f718f92721af3b95e74349a".into()),
        checksum_source: "test",
        size: None,
        unpack_to: None,
        description: "test",
    };
    let msg = err_text(download::download(&remote, t.path(), &mut no_progress()));
    assert!(msg.contains("cannot download"), "{msg}");
    assert!(msg.contains("put it at") && msg.contains("cifar-10-python.tar.gz"), "{msg}");
    assert!(msg.contains("c58f30108f718f92721af3b95e74349a"), "{msg}");
}

#[test]
fn download_unpacks_zips_and_uses_a_file_put_there_by_hand() {
    let t = tmp();
    // A CycleGAN-style zip with one image per folder.
    let src = tmp();
    for d in ["trainA", "trainB", "testA", "testB"] {
        write_png(&src.path().join("tiny2set").join(d).join("0.png"), 4, 4, [9, 9, 9]);
    }
    let zip_path = t.path().join("made.zip");
    {
        let mut z = zip::ZipWriter::new(fs::File::create(&zip_path).unwrap());
        let o = zip::write::FileOptions::default().compression_method(zip::CompressionMethod::Deflated);
        for d in ["trainA", "trainB", "testA", "testB"] {
            z.start_file(format!("tiny2set/{d}/0.png"), o).unwrap();
            z.write_all(&fs::read(src.path().join("tiny2set").join(d).join("0.png")).unwrap()).unwrap();
        }
        z.finish().unwrap();
    }
    let bytes = fs::read(&zip_path).unwrap();
    let s = serve(bytes.clone(), None);
    let remote = Remote {
        name: "tiny2set".into(),
        url: s.url.clone(),
        file: "tiny2set.zip".into(),
        checksum: md5_of(&bytes),
        checksum_source: "test",
        size: Some(bytes.len() as u64),
        unpack_to: Some("tiny2set".into()),
        description: "test",
    };
    let out = t.path().join("dl");
    let path = download::download(&remote, &out, &mut no_progress()).unwrap();
    assert_eq!(path, out.join("tiny2set"));
    let ds = open_with(&path, &opts(t.path())).unwrap();
    assert_eq!(ds.format, DataFormat::Unpaired);
    assert_eq!(ds.train.len(), 2);
    // Again, offline: the verified file and the unpacked folder are used as they are.
    let offline = Remote { url: "http://127.0.0.1:9/unreachable.zip".into(), ..remote.clone() };
    assert_eq!(download::download(&offline, &out, &mut no_progress()).unwrap(), path);
    // A file put there by hand with the wrong content is refused, naming it.
    let other = t.path().join("other");
    fs::create_dir_all(&other).unwrap();
    fs::write(other.join("tiny2set.zip"), b"not it").unwrap();
    assert_err(download::download(&offline, &other, &mut no_progress()), "tiny2set.zip", "checksum mismatch");
    // A zip that does not hold the expected folder.
    let mut r2 = remote.clone();
    r2.unpack_to = Some("elsewhere".into());
    let third = t.path().join("third");
    fs::create_dir_all(&third).unwrap();
    fs::write(third.join("tiny2set.zip"), &bytes).unwrap();
    assert_err(download::download(&r2, &third, &mut no_progress()), "tiny2set.zip", "did not contain the folder elsewhere/");
}

#[test]
fn catalog_names_and_checksums() {
    let all = download::catalog();
    for name in [
        "cifar10",
        "cifar10-binary",
        "cifar100",
        "cifar100-binary",
        "tiny-imagenet",
        "apple2orange",
        "horse2zebra",
        "monet2photo",
    ] {
        let r = download::find(name).unwrap();
        let hex_len = match &r.checksum {
            Checksum::Md5(h) => (h.len() == 32).then_some(()),
            Checksum::Sha256(h) => (h.len() == 64).then_some(()),
        };
        assert!(hex_len.is_some(), "{name}");
        assert!(r.url.ends_with(&r.file), "{name}");
    }
    assert_eq!(download::find("cifar10").unwrap().checksum, Checksum::Md5("c58f30108f718f92721af3b95e74349a".into()));
    let msg = err_text(download::find("mnist"));
    assert!(msg.contains("unknown dataset") && msg.contains("horse2zebra"), "{msg}");
    assert!(all.len() >= 15);
}

#[test]
fn verify_files_larger_than_one_read() {
    let t = tmp();
    let p = t.path().join("x");
    let data = body(3 << 20);
    fs::write(&p, &data).unwrap();
    download::verify(&p, &md5_of(&data)).unwrap();
    use sha2::Digest;
    let sha: String = sha2::Sha256::digest(&data).iter().map(|x| format!("{x:02x}")).collect();
    download::verify(&p, &Checksum::Sha256(sha)).unwrap();
    assert_err(download::verify(&p, &Checksum::Sha256("ab".repeat(32))), "x", "sha256 is");
}
