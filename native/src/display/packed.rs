//! Kept item JSON packed with LZ4 (a block): a long finished item's bytes are packed once when kept and unpacked for
//! each record, export or change that reads them.

use lz4_flex::block::{compress_into, decompress_into, get_maximum_output_size};

/// Kept JSON shorter than this is held as it is: packing each short item alone saves little of its bytes and costs
/// a fixed setup (LZ4's table) per item.
pub const MIN_PACKED: usize = 1024;

/// `json` packed (its length, four bytes little-endian, then the LZ4 block), appended to `out` after what it
/// holds; false, appending nothing, when that would not be shorter.
pub fn pack(out: &mut Vec<u8>, json: &[u8]) -> bool {
    let Ok(length) = u32::try_from(json.len()) else { return false };
    let at = out.len();
    out.extend_from_slice(&length.to_le_bytes());
    out.resize(at + 4 + get_maximum_output_size(json.len()), 0);
    match compress_into(json, &mut out[at + 4..]) {
        Ok(packed) if 4 + packed < json.len() => {
            out.truncate(at + 4 + packed);
            true
        }
        _ => {
            out.truncate(at);
            false
        }
    }
}

/// Append the JSON `packed` holds (`pack`'s bytes) to `out`.
pub fn unpack(out: &mut Vec<u8>, packed: &[u8]) {
    let (length, block) = packed.split_at(4);
    let length = u32::from_le_bytes([length[0], length[1], length[2], length[3]]) as usize;
    let at = out.len();
    out.resize(at + length, 0);
    let unpacked = decompress_into(block, &mut out[at..]);
    assert_eq!(unpacked.ok(), Some(length), "kept item JSON unpacks to its length");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_json_unpacks_to_its_bytes() {
        let part = br#"{"name":"a13n.pydantic_ai.part_delta","value":{"delta":{"args_delta":"{\"a\": 1}"}}}"#;
        let json: Vec<u8> = part.iter().copied().cycle().take(40 * part.len()).collect();
        let mut out = b"id".to_vec();
        assert!(pack(&mut out, &json));
        assert!(out.len() < 2 + json.len() / 4);
        let mut back = b"x".to_vec();
        unpack(&mut back, &out[2..]);
        assert_eq!(&back[1..], json.as_slice());
        let mut out = Vec::new();
        assert!(!pack(&mut out, b"{}}"));
        assert!(out.is_empty());
    }
}
