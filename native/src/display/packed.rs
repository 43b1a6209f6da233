//! Kept item JSON packed once when kept and unpacked for each record, export or change that reads it: with LZ4 (a
//! block), or, from MIN_DEFLATED bytes on, with deflate, whose entropy coding also shrinks text that seldom repeats
//! itself (a long generated payload), where LZ4 finds few matches.

use std::iter;

use lz4_flex::block::{compress_into, decompress_into, get_maximum_output_size};
use miniz_oxide::deflate::compress_to_vec;
use miniz_oxide::inflate::decompress_slice_iter_to_slice;

/// Kept JSON shorter than this is held as it is: packing each short item alone saves little of its bytes and costs
/// a fixed setup (LZ4's table) per item.
pub const MIN_PACKED: usize = 1024;

/// Kept JSON of at least this many bytes is deflated: rare enough that deflate's setup and its slower unpacking
/// cost little beside the bytes it saves.
pub const MIN_DEFLATED: usize = 4096;

/// Deflate's fastest level: most of what deflate saves over LZ4 on such JSON is its entropy coding.
const DEFLATE_LEVEL: u8 = 1;

const LZ4: u8 = 0;
const DEFLATE: u8 = 1;

/// `json` packed (its length, four bytes little-endian, the codec, then its block), appended to `out` after what it
/// holds; false, appending nothing, when that would not be shorter.
pub fn pack(out: &mut Vec<u8>, json: &[u8]) -> bool {
    let Ok(length) = u32::try_from(json.len()) else { return false };
    let at = out.len();
    out.extend_from_slice(&length.to_le_bytes());
    let packed = if json.len() >= MIN_DEFLATED {
        out.push(DEFLATE);
        out.extend_from_slice(&compress_to_vec(json, DEFLATE_LEVEL));
        out.len() - at < json.len()
    } else {
        out.push(LZ4);
        out.resize(at + 5 + get_maximum_output_size(json.len()), 0);
        match compress_into(json, &mut out[at + 5..]) {
            Ok(packed) if 5 + packed < json.len() => {
                out.truncate(at + 5 + packed);
                true
            }
            _ => false,
        }
    };
    if !packed {
        out.truncate(at);
    }
    packed
}

/// Append the JSON `packed` holds (`pack`'s bytes) to `out`.
pub fn unpack(out: &mut Vec<u8>, packed: &[u8]) {
    let (head, block) = packed.split_at(5);
    let length = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let at = out.len();
    out.resize(at + length, 0);
    let unpacked = match head[4] {
        DEFLATE => decompress_slice_iter_to_slice(&mut out[at..], iter::once(block), false, true).ok(),
        _ => decompress_into(block, &mut out[at..]).ok(),
    };
    assert_eq!(unpacked, Some(length), "kept item JSON unpacks to its length");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(json: &[u8]) -> Option<usize> {
        let mut out = b"id".to_vec();
        if !pack(&mut out, json) {
            assert_eq!(out, b"id");
            return None;
        }
        let mut back = b"x".to_vec();
        unpack(&mut back, &out[2..]);
        assert_eq!(&back[1..], json);
        Some(out.len() - 2)
    }

    #[test]
    fn packed_json_unpacks_to_its_bytes() {
        let part = br#"{"name":"a13n.pydantic_ai.part_delta","value":{"delta":{"args_delta":"{\"a\": 1}"}}}"#;
        let json: Vec<u8> = part.iter().copied().cycle().take(40 * part.len()).collect();
        assert!(round_trip(&json).unwrap() < json.len() / 4);
        assert_eq!(round_trip(b"{}}"), None);
    }

    #[test]
    fn long_json_of_few_repeats_is_deflated_to_its_entropy() {
        // A payload of ten letters and two longer characters in a fixed xorshift order: LZ4 finds few matches in
        // it, deflate codes most characters in about four bits.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut text = String::from(r#"{"arguments":"{\"blob\": \""#);
        for _ in 0..60_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            text.push(['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'é', '🙂'][(state % 12) as usize]);
        }
        text.push_str(r#"\"}"}}"#);
        let packed = round_trip(text.as_bytes()).unwrap();
        let lz4 = lz4_flex::block::compress(text.as_bytes()).len();
        assert!(packed < text.len() / 2 && packed < lz4 * 2 / 3, "{packed} of {} (LZ4: {lz4})", text.len());
    }
}
