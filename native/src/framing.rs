//! The bytes Kafka's producers count for a record sent alone (`worker/_framing.py`): the one formula the output
//! records and the display records are sized by.

/// A record sent alone: the v2 batch header (61 bytes) and the most framing one record can take (21 bytes).
pub const RECORD_OVERHEAD_BYTES: usize = 61 + 21;

/// Bytes of the zig-zag varint Kafka writes for the length `n`.
pub fn varint_size(n: usize) -> usize {
    let mut z = (n as u128) << 1;
    let mut size = 1;
    while z >= 0x80 {
        z >>= 7;
        size += 1;
    }
    size
}

/// Bytes of a field of `len` bytes behind its varint length.
pub fn field_size(len: usize) -> usize {
    varint_size(len) + len
}
