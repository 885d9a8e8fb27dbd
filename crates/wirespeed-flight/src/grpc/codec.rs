//! FlightData written straight from a [`Frame`]: the protobuf framing around the metadata and
//! the body's pieces, each copied once into gRPC's buffer. prost would need the body in one
//! piece first, which costs a second copy of every batch.

use std::marker::PhantomData;

use bytes::BufMut;
use tonic::Status;
use tonic::codec::{Codec, EncodeBuf, Encoder};
use tonic_prost::ProstDecoder;

use crate::ipc::Frame;

/// Sends [`Frame`]s as FlightData; receives `D` as prost decodes it.
pub(crate) struct FrameCodec<D>(PhantomData<D>);

impl<D> Default for FrameCodec<D> {
    fn default() -> Self {
        FrameCodec(PhantomData)
    }
}

impl<D: prost::Message + Default + Send + 'static> Codec for FrameCodec<D> {
    type Encode = Frame;
    type Decode = D;
    type Encoder = FrameEncoder;
    type Decoder = ProstDecoder<D>;

    fn encoder(&mut self) -> FrameEncoder {
        FrameEncoder
    }

    fn decoder(&mut self) -> ProstDecoder<D> {
        ProstDecoder::default()
    }
}

pub(crate) struct FrameEncoder;

/// FlightData's field numbers (arrow's Flight.proto); all three are length-delimited.
const DATA_HEADER: u32 = 2;
const APP_METADATA: u32 = 3;
const DATA_BODY: u32 = 1000;

impl Encoder for FrameEncoder {
    type Item = Frame;
    type Error = Status;

    fn encode(&mut self, frame: Frame, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.reserve(encoded_len(&frame));
        write(&frame, dst);
        Ok(())
    }
}

/// Writes `frame` as an encoded FlightData. proto3 leaves empty fields out, and fields go in
/// field-number order, as prost writes them.
fn write(frame: &Frame, dst: &mut impl BufMut) {
    for (field, bytes) in [(DATA_HEADER, &frame.meta[..]), (APP_METADATA, &frame.app_metadata[..])] {
        if !bytes.is_empty() {
            key(field, dst);
            prost::encoding::encode_varint(bytes.len() as u64, dst);
            dst.put_slice(bytes);
        }
    }
    let body_len = frame.body_len();
    if body_len > 0 {
        key(DATA_BODY, dst);
        prost::encoding::encode_varint(body_len as u64, dst);
        for piece in &frame.body {
            dst.put_slice(piece);
        }
    }
}

fn key(field: u32, dst: &mut impl BufMut) {
    prost::encoding::encode_key(field, prost::encoding::WireType::LengthDelimited, dst);
}

fn field_len(field: u32, len: usize) -> usize {
    if len == 0 { 0 } else { prost::encoding::key_len(field) + prost::encoding::encoded_len_varint(len as u64) + len }
}

fn encoded_len(frame: &Frame) -> usize {
    field_len(DATA_HEADER, frame.meta.len())
        + field_len(APP_METADATA, frame.app_metadata.len())
        + field_len(DATA_BODY, frame.body_len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_buffer::Buffer;
    use arrow_flight::FlightData;
    use bytes::Bytes;

    /// What we write is what prost writes for the same FlightData, and decodes back to it.
    #[test]
    fn frames_encode_as_prost_encodes_flight_data() {
        let body = vec![Buffer::from(vec![1u8; 64]), Buffer::from(vec![2u8; 200]), Buffer::from(vec![3u8; 8])];
        let cases = [
            Frame { meta: Bytes::from(vec![9u8; 300]), body, app_metadata: Bytes::from_static(b"app") },
            Frame::metadata_only(Bytes::from_static(b"only app metadata")),
            Frame::default(),
        ];
        for frame in cases {
            let mut ours = Vec::new();
            write(&frame, &mut ours);
            let theirs = prost::Message::encode_to_vec(&crate::grpc::flight_data(frame.clone()));
            assert_eq!(ours, theirs);
            assert_eq!(ours.len(), encoded_len(&frame));
            let back = <FlightData as prost::Message>::decode(&ours[..]).unwrap();
            assert_eq!(back.data_body, frame.body_bytes());
        }
    }
}
