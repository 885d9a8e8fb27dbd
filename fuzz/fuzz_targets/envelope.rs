//! Wrapped copy-protocol messages (zstd and AES-256-GCM): any header and body open without
//! panic and never grow past the limit; what `wrap` made opens back to the original, and a
//! forged sealed message never opens.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wirespeed_files::fuzzing::{Place, SealKey, open_body, open_header, wrap};

const MAX: u64 = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let key = SealKey::new(&[9; 32]);
    let at = Place { stream: 3, counter: 8 };
    let cut = rest.len().min(rest.first().copied().unwrap_or(0) as usize);
    let (header, body) = rest.split_at(cut);
    if mode & 1 == 0 {
        // Whatever a peer sends.
        let with_key = (mode & 2 != 0).then_some(&key);
        if let Ok(opened) = open_header(header, with_key, at)
            && let Ok(out) = open_body(opened.flags, body.to_vec(), with_key, at, MAX)
        {
            assert!(out.len() as u64 <= MAX.max(body.len() as u64));
            assert!(opened.flags & 1 == 0 || with_key.is_some(), "a forged seal opened");
        }
        return;
    }
    // What this side wraps opens back to what it was.
    let compress = (mode & 2 != 0).then_some(1);
    let seal = (mode & 4 != 0).then_some((&key, at));
    let Ok((wire, new_body)) = wrap(header, &[body], compress, seal) else { return };
    let opened = open_header(&wire, Some(&key), at).expect("own header opens");
    assert_eq!(&opened.header[..], header);
    let sent = new_body.unwrap_or_else(|| body.to_vec());
    let got = open_body(opened.flags, sent, Some(&key), at, body.len() as u64).expect("own body opens");
    assert_eq!(got, body);
});
