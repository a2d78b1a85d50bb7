//! Which server holds a key, as gomemcache's `ServerList.PickServer` decides (so that a
//! deployment of envoyproxy/ratelimit moving to Floodgate keeps finding its counters): with one
//! server, that server; with `n > 1`, the server at index `crc32(key) mod n` in the order the
//! servers were given, `crc32` being CRC-32/IEEE (the zlib and Ethernet checksum:
//! polynomial 0xEDB88320 reflected, initial value and final xor all ones). Changing the list
//! (its length or order) moves keys, as it does upstream.

/// CRC-32/IEEE of `bytes`.
pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    !bytes.iter().fold(!0u32, |crc, &b| {
        TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8)
    })
}

/// The index of the server, of `servers`, that holds `key`; `None` when there is none.
pub(crate) fn pick(key: &str, servers: usize) -> Option<usize> {
    match servers {
        0 => None,
        1 => Some(0),
        n => Some((crc32(key.as_bytes()) % n as u32) as usize),
    }
}

/// The CRC of each byte value, computed at compile time.
const TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_ieee() {
        // The standard check value, and values Go's `crc32.ChecksumIEEE` gives.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"a"), 0xE8B7_BE43);
        assert_eq!(
            crc32(b"The quick brown fox jumps over the lazy dog"),
            0x414F_A339
        );
    }

    #[test]
    fn servers_are_picked_as_gomemcache_picks_them() {
        assert_eq!(pick("anything", 0), None);
        assert_eq!(pick("anything", 1), Some(0));
        // 0xCBF43926 = 3421780262: mod 2 = 0, mod 3 = 2, mod 5 = 2.
        assert_eq!(pick("123456789", 2), Some(0));
        assert_eq!(pick("123456789", 3), Some(2));
        assert_eq!(pick("123456789", 5), Some(2));
        // 0xE8B7BE43 = 3904355907: mod 2 = 1, mod 3 = 0, mod 7 = 4.
        assert_eq!(pick("a", 2), Some(1));
        assert_eq!(pick("a", 3), Some(0));
        assert_eq!(pick("a", 7), Some(4));
    }
}
