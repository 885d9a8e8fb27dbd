//! A session after its handshake fed any frames, with the application reading between them:
//! no panic, and once it fails it stays failed.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wirespeed::Fabric;
use wirespeed::proto::decoder::FrameDecoder;
use wirespeed::proto::frame::Limits;
use wirespeed::proto::handshake::Params;
use wirespeed::proto::session::{RecvEvent, Role, Session};

const P: Params = Params { fabric: Fabric::Tcp, max_streams: 4, stream_window: 4096 };

fuzz_target!(|data: &[u8]| {
    let Some((&role, mut rest)) = data.split_first() else { return };
    let role = if role & 1 == 0 { Role::Server } else { Role::Client };
    let mut s = Session::new(role, P, P);
    let mut dec = FrameDecoder::new(Limits { max_meta: 256, max_payload: 8192 });
    let mut opened = Vec::new();
    if role == Role::Client {
        opened.extend(s.open_stream().ok());
    }
    while !rest.is_empty() {
        let Ok(used) = dec.feed(rest) else { return };
        rest = &rest[used..];
        let Some(f) = dec.take_frame() else { return };
        if s.on_frame(&f.header, &f.meta, f.payload.into()).is_err() {
            s.fail(wirespeed::Error::Closed);
            assert!(s.is_failed() && s.terminal_error().is_some());
            return;
        }
        while let Some(Ok(id)) = s.poll_accept() {
            opened.push(id);
        }
        for &id in &opened {
            // Finished is the stream's lasting state: reported again on every poll.
            while let Some(Ok(ev)) = s.poll_recv(id) {
                if matches!(ev, RecvEvent::Finished) {
                    break;
                }
            }
        }
        let _ = s.poll_transmit();
    }
});
