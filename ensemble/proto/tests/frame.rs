//! The frame decoder: reassembly across arbitrary reads, limits, hostile lengths.

use baton_proto::Writer;
use baton_proto::frame::*;
use bytes::BytesMut;
use proptest::collection::vec;
use proptest::prelude::*;

fn frame_bytes(payload: &[u8]) -> Vec<u8> {
    let len = i32::try_from(payload.len()).expect("small test payload");
    let mut out = len.to_be_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// Frames split at arbitrary read boundaries come out whole and in order.
    #[test]
    fn reassembles_across_reads(
        payloads in vec(vec(any::<u8>(), 0..300), 0..8),
        chunk_sizes in vec(1usize..64, 1..32),
    ) {
        let stream: Vec<u8> = payloads.iter().flat_map(|p| frame_bytes(p)).collect();
        let mut decoder = FrameDecoder::new(300);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut rest = &stream[..];
        let mut sizes = chunk_sizes.iter().cycle();
        while !rest.is_empty() {
            let n = (*sizes.next().expect("cycle")).min(rest.len());
            buf.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            while let Some(frame) = decoder.decode(&mut buf).expect("valid stream") {
                got.push(frame.to_vec());
            }
        }
        prop_assert_eq!(got, payloads);
        prop_assert!(buf.is_empty());
    }

    /// Arbitrary bytes either yield frames no larger than the limit or an error; the buffer
    /// stays within a small multiple of one maximal frame (BytesMut grows geometrically).
    #[test]
    fn arbitrary_streams_are_bounded(
        stream in vec(any::<u8>(), 0..2048),
        chunk_sizes in vec(1usize..256, 1..16),
    ) {
        const MAX: usize = 512;
        let mut decoder = FrameDecoder::new(MAX);
        let mut buf = BytesMut::new();
        let mut rest = &stream[..];
        let mut sizes = chunk_sizes.iter().cycle();
        'feed: while !rest.is_empty() {
            let n = (*sizes.next().expect("cycle")).min(rest.len());
            buf.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            loop {
                match decoder.decode(&mut buf) {
                    Ok(Some(frame)) => prop_assert!(frame.len() <= MAX),
                    Ok(None) => break,
                    Err(_) => break 'feed,
                }
            }
            prop_assert!(buf.capacity() <= 4 * (MAX + 4 + 256));
        }
    }
}

#[test]
fn limit_is_inclusive() {
    let mut decoder = FrameDecoder::new(10);
    let mut buf = BytesMut::from(&frame_bytes(&[7; 10])[..]);
    assert_eq!(
        decoder.decode(&mut buf).expect("ok").expect("frame").len(),
        10
    );

    let eleven = frame_bytes(&[7; 11]);
    let mut buf = BytesMut::from(&eleven[..]);
    assert_eq!(
        decoder.decode(&mut buf),
        Err(FrameError::TooLarge { len: 11, max: 10 })
    );
    assert_eq!(&buf[..], &eleven[..], "an error leaves the buffer alone");
}

/// The limit is judged on the prefix alone: a huge claimed length fails before its payload
/// arrives, and reserves nothing.
#[test]
fn hostile_lengths_fail_on_the_prefix() {
    let mut decoder = FrameDecoder::default();
    let mut buf = BytesMut::from(&i32::MAX.to_be_bytes()[..]);
    let before = buf.capacity();
    assert_eq!(
        decoder.decode(&mut buf),
        Err(FrameError::TooLarge {
            len: i32::MAX as usize,
            max: DEFAULT_MAX_FRAME
        })
    );
    assert_eq!(buf.capacity(), before);

    let mut buf = BytesMut::from(&(-1i32).to_be_bytes()[..]);
    assert_eq!(
        decoder.decode(&mut buf),
        Err(FrameError::Negative { len: -1 })
    );
    let mut buf = BytesMut::from(&i32::MIN.to_be_bytes()[..]);
    assert_eq!(
        decoder.decode(&mut buf),
        Err(FrameError::Negative { len: i32::MIN })
    );
}

/// ZooKeeper 3.8 with default settings accepts a 1,048,575-byte frame and closes on 1,048,576.
#[test]
fn default_limit_matches_zookeeper() {
    let mut decoder = FrameDecoder::default();
    let mut buf = BytesMut::from(&1_048_575i32.to_be_bytes()[..]);
    assert_eq!(decoder.decode(&mut buf), Ok(None));
    assert!(
        buf.capacity() >= 4 + 1_048_575,
        "room reserved for the frame"
    );
    let mut buf = BytesMut::from(&1_048_576i32.to_be_bytes()[..]);
    assert!(decoder.decode(&mut buf).is_err());
}

#[test]
fn empty_frames_and_partial_prefixes() {
    let mut decoder = FrameDecoder::new(8);
    let mut buf = BytesMut::from(&[0u8, 0, 0][..]);
    assert_eq!(decoder.decode(&mut buf), Ok(None));
    buf.extend_from_slice(&[0]);
    assert_eq!(
        decoder.decode(&mut buf).expect("ok").expect("frame").len(),
        0
    );
    assert!(buf.is_empty());
}

/// Several frames written into one writer, each with its own back-filled length.
#[test]
fn write_frame_back_fills_lengths() {
    let mut w = Writer::new();
    write_frame(&mut w, |w| w.write_i32(0x0102_0304));
    write_frame(&mut w, |_| {});
    let start = begin_frame(&mut w);
    w.write_string("ab");
    end_frame(&mut w, start);
    assert_eq!(
        w.as_slice(),
        &[
            0, 0, 0, 4, 1, 2, 3, 4, //
            0, 0, 0, 0, //
            0, 0, 0, 6, 0, 0, 0, 2, b'a', b'b',
        ]
    );
}
