"""A pytest plugin that runs pyarrow's own Flight tests against wirespeed.flight: loaded with
`-p` before they are collected, it puts wirespeed.flight where they import pyarrow.flight
from, so that their `flight`, `FlightClient` and `FlightServerBase` are wirespeed's."""

import sys

import pyarrow

from wirespeed import flight

sys.modules["pyarrow.flight"] = flight
pyarrow.flight = flight  # type: ignore[attr-defined]
