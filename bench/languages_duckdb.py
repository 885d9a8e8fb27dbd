"""DuckDB's count(*) over a Flight reader, timed: `languages_duckdb.py wirespeed|pyarrow URL TICKET
[TIMES]`, TIMES reads on one client, each timed (the key file from WIRESPEED_KEY_FILE for
wirespeed). bench/languages.sh runs it."""
import os
import sys
import time

import duckdb
import pyarrow.flight as paflight

from wirespeed import flight

which, url, ticket = sys.argv[1:4]
times = int(sys.argv[4]) if len(sys.argv) > 4 else 1
if which == "wirespeed":
    with open(os.environ["WIRESPEED_KEY_FILE"]) as f:
        client = flight.connect(url, key=f.read().rstrip("\n"))
else:
    client = paflight.connect(url)
for _ in range(times):
    start = time.perf_counter()
    reader = client.do_get(paflight.Ticket(ticket.encode()))
    # pyarrow's FlightStreamReader has no __arrow_c_stream__: its RecordBatchReader is what DuckDB scans.
    stream = reader if which == "wirespeed" else reader.to_reader()
    [(rows,)] = duckdb.sql("select count(*) from stream").fetchall()
    plane = getattr(reader, "plane", "grpc")
    print(f"plane {plane} rows {rows} seconds {time.perf_counter() - start:.6f}", flush=True)
