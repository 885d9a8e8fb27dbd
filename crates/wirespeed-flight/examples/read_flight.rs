//! Reads one flight and says how fast: `read_flight URL TICKET [TRANSPORT [TIMES]]`, the key
//! from WIRESPEED_KEY; with TIMES, reads it that often and times the last read (a warm one).
//! The Rust client's figure that `make bench-languages` sets the others beside.

use std::time::Instant;

use wirespeed_flight::{Client, PlaneChoice};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(url), Some(ticket)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: read_flight URL TICKET [auto|grpc|shm|tcp|ucx]");
        std::process::exit(2);
    };
    let transport: PlaneChoice = args.get(3).map_or("auto", String::as_str).parse()?;
    let times: usize = args.get(4).map_or(Ok(1), |t| t.parse())?;
    let client = Client::connect(url)?.with_transport(transport).with_key_from_env()?;
    for _ in 0..times {
        let start = Instant::now();
        let reader = client.do_get_ticket(ticket.as_bytes())?;
        let plane = reader.plane().name();
        let mut rows = 0;
        for batch in reader {
            rows += batch?.num_rows();
        }
        println!("plane {plane} rows {rows} seconds {:.6}", start.elapsed().as_secs_f64());
    }
    Ok(())
}
