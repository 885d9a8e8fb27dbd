//! A copy on this host: both ends are threads of this process, joined in memory (or over a
//! fabric of one's choosing, to measure it).

use std::path::PathBuf;
use std::time::Duration;

use wirespeed::fabric::Choice;
use wirespeed::{Config, Connection, Key, Stream};

use crate::fabric_choice::{self, Server};
use crate::{FilesError, Input, Output, Progress, Result, Side, SinkOptions, SourceOptions, Summary};

/// Copies `input` to `dst`; `progress` counts the source's side. The end that failed first
/// reports; the other only heard of it from its peer.
pub fn copy_local(
    input: &Input,
    dst: PathBuf,
    transport: Choice,
    source: &SourceOptions,
    sink: &SinkOptions,
    progress: &Progress,
) -> Result<Summary> {
    let (key, _) = Key::generate()?;
    let (paired, server) = if transport == Choice::Auto {
        let (client, server) = wirespeed::transport::in_process::pair(&Config::default())?;
        (Some(client), Accept::Paired(server))
    } else {
        (None, Accept::Listening(Server::bind("127.0.0.1:0", transport, &key, &Config::default())?))
    };
    let addr = match &server {
        Accept::Listening(server) => format!("127.0.0.1:{}", server.port()),
        Accept::Paired(_) => String::new(),
    };
    std::thread::scope(|s| {
        let receiving = s.spawn(move || -> Result<Summary> {
            let (conn, control) = server.accept(Duration::from_secs(30))?;
            crate::receive(&conn, Side::Server(control), &Output::Path(dst), sink, &Progress::default())
        });
        let conn = match paired {
            Some(conn) => conn,
            None => fabric_choice::connect(&addr, transport, &key, &Config::default())?,
        };
        let sent = crate::send(&conn, Side::Client, input, source, progress);
        drop(conn);
        let received = receiving.join().map_err(|_| FilesError::Internal("the receiving thread panicked"))?;
        match (received, sent) {
            (Err(FilesError::Remote { .. }), Err(s)) => Err(s),
            (received, sent) => received.and(sent),
        }
    })
}

enum Accept {
    Paired(Connection),
    Listening(Server),
}

impl Accept {
    fn accept(self, wait: Duration) -> Result<(Connection, Stream)> {
        match self {
            Accept::Paired(conn) => {
                let control = conn.accept_stream_timeout(wait)?;
                Ok((conn, control))
            }
            Accept::Listening(server) => server.accept(wait),
        }
    }
}
