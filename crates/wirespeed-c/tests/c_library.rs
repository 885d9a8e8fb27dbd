//! The C library from C: tests/c/flight_test.c, built with gcc under AddressSanitizer and
//! UndefinedBehaviorSanitizer against the shared library cargo built, runs every call and
//! every bad input; reads from a `wirespeed serve` that is killed mid-stream; exchanges with
//! `wirespeed bench flight-server`; and serves and reads over mutual TLS with a password.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};

/// Where cargo put this build's binaries (target/debug for tests).
fn build_dir() -> PathBuf {
    deps_dir().parent().unwrap().to_path_buf()
}

/// Where cargo put the library as this test's dependency: the build that matches the test
/// (the copy beside the binaries is refreshed only when the library itself is asked for).
fn deps_dir() -> PathBuf {
    std::env::current_exe().unwrap().parent().unwrap().to_path_buf()
}

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Builds tests/c/flight_test.c into `dir`.
fn build_c_test(dir: &Path) -> PathBuf {
    let lib = deps_dir();
    assert!(lib.join("libwirespeed_c.so").exists(), "no libwirespeed_c.so in {}", lib.display());
    let exe = dir.join("flight_test");
    let out = Command::new("cc")
        .args(["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-g", "-fsanitize=address,undefined"])
        .arg("-fno-sanitize-recover=all")
        .arg(format!("-I{}", crate_dir().join("include").display()))
        .arg(crate_dir().join("tests/c/flight_test.c"))
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lwirespeed_c", "-lpthread", "-o"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "cc: {}", String::from_utf8_lossy(&out.stderr));
    exe
}

/// What a program that links the static library needs besides (`cargo rustc -- --print
/// native-static-libs` lists them; UCX and libfabric are opened at run time, when used).
const STATIC_LIBS: [&str; 6] = ["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl"];

#[test]
fn the_static_library_links_a_program_that_runs_every_call() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("flight_test_static");
    let built = Command::new("cc")
        .args(["-std=c11", "-D_GNU_SOURCE", "-O1"])
        .arg(format!("-I{}", crate_dir().join("include").display()))
        .arg(crate_dir().join("tests/c/flight_test.c"))
        .arg(deps_dir().join("libwirespeed_c.a"))
        .args(STATIC_LIBS)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(built.status.success(), "cc: {}", String::from_utf8_lossy(&built.stderr));
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    write_numbers(&data.join("numbers.arrow"), 1_000_000);
    let out = Command::new(&exe).arg(&data).arg("1000000").arg(key_file(dir.path())).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.ends_with("all ok\n"), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
}

/// `rows` int64s "x" from 0, in batches of 65536, as an Arrow IPC file.
fn write_numbers(path: &Path, rows: i64) {
    let file = std::fs::File::create(path).unwrap();
    let schema =
        Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new("x", arrow_schema::DataType::Int64, true)]));
    let mut writer = arrow_ipc::writer::FileWriter::try_new(file, &schema).unwrap();
    for start in (0..rows).step_by(65536) {
        let column = Int64Array::from_iter_values(start..(start + 65536).min(rows));
        writer.write(&RecordBatch::try_new(schema.clone(), vec![Arc::new(column) as ArrayRef]).unwrap()).unwrap();
    }
    writer.finish().unwrap();
}

fn key_file(dir: &Path) -> PathBuf {
    let path = dir.join("key");
    std::fs::write(&path, "a key for the C tests\n").unwrap();
    path
}

/// The sanitizers' settings: leaks are errors, as is any other finding.
fn sanitized(command: &mut Command) -> &mut Command {
    command.env("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0").env("UBSAN_OPTIONS", "print_stacktrace=1")
}

#[test]
fn a_c_program_runs_every_call_and_every_bad_input_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c_test(dir.path());
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    write_numbers(&data.join("numbers.arrow"), 1_000_000);
    let out = sanitized(&mut Command::new(&exe)).arg(&data).arg("1000000").arg(key_file(dir.path())).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.ends_with("all ok\n"), "{stdout}");
    assert!(!stderr.contains("Sanitizer"), "{stderr}");
    // The upload is a whole Arrow file where the server keeps flights; the failed one left nothing.
    let names: Vec<String> =
        std::fs::read_dir(&data).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.contains(&"up.arrow".to_string()) && names.len() == 2, "{names:?}");
}

#[test]
fn a_server_killed_mid_stream_ends_the_stream_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c_test(dir.path());
    // More than a plane's credit window, so that the server is still sending when it dies.
    write_numbers(&dir.path().join("big.arrow"), 8_000_000);
    let key = key_file(dir.path());
    let dir_arg = dir.path().to_str().unwrap();
    let (mut serve, url) = start_wirespeed(&["serve", "--listen", "127.0.0.1:0", dir_arg], &key);
    let mut reader = sanitized(&mut Command::new(&exe))
        .args(["--get", &url, "big.arrow"])
        .arg(&key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(reader.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.starts_with("reading over shm"), "{first}");
    serve.kill().unwrap();
    serve.wait().unwrap();
    reader.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut end = String::new();
    out.read_line(&mut end).unwrap();
    assert!(reader.wait().unwrap().success());
    assert!(end.starts_with("ended rc=") && !end.starts_with("ended rc=0"), "{end}");
    assert!(!end.contains("status=0 "), "a Flight code: {end}");
}

/// Runs `wirespeed ARGS` with the key file's key, until it says `listening` or `serving`;
/// returns it and its gRPC URL.
fn start_wirespeed(args: &[&str], key: &Path) -> (std::process::Child, String) {
    let key_text = std::fs::read_to_string(key).unwrap();
    let mut child = Command::new(build_dir().join("wirespeed"))
        .args(args)
        .env("WIRESPEED_KEY", key_text.trim_end())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    for out in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(url) = line.split_whitespace().find(|w| w.starts_with("grpc://")) {
                    let _ = tx.send(url.to_string());
                }
            }
        });
    }
    let url = rx.recv_timeout(std::time::Duration::from_secs(30)).expect("wirespeed says where it listens");
    (child, url)
}

#[test]
fn an_exchange_sends_a_c_stream_and_reads_the_echo() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c_test(dir.path());
    let key = key_file(dir.path());
    let (mut server, url) = start_wirespeed(&["bench", "flight-server", "--listen", "127.0.0.1:0"], &key);
    let out = sanitized(&mut Command::new(&exe)).args(["--exchange", &url]).arg(&key).output().unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("exchanged ok"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, and server and client certificates it issued, as PEM files in `dir`.
fn certificates(dir: &Path) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, "wirespeed C tests");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    std::fs::write(dir.join("ca.pem"), params.self_signed(&ca_key).unwrap().pem()).unwrap();
    let issuer = Issuer::new(params, ca_key);
    for (name, purpose) in
        [("server", ExtendedKeyUsagePurpose::ServerAuth), ("client", ExtendedKeyUsagePurpose::ClientAuth)]
    {
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.extended_key_usages = vec![purpose];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    }
    std::fs::write(dir.join("password"), "a password for the C tests\n").unwrap();
}

#[test]
fn a_c_server_and_clients_speak_mutual_tls_with_a_password() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c_test(dir.path());
    let (data, certs) = (dir.path().join("data"), dir.path().join("certs"));
    std::fs::create_dir(&data).unwrap();
    std::fs::create_dir(&certs).unwrap();
    write_numbers(&data.join("numbers.arrow"), 1_000_000);
    certificates(&certs);
    let out = sanitized(&mut Command::new(&exe))
        .arg("--tls")
        .arg(&data)
        .arg(&certs)
        .arg(key_file(dir.path()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.ends_with("tls ok\n"), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("the data over shm"), "{stdout}");
}
