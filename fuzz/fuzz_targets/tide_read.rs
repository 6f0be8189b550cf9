//! Fuzz target: arbitrary bytes, behind a TIDE block or not, through the TIDE reader `info`
//! uses. It must never panic, and what it counts stays within what the bytes can hold.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ulog_recv::export::tide::read::read_blocks;

fuzz_target!(|input: &[u8]| {
    let Some((&with_header, bytes)) = input.split_first() else {
        return;
    };
    let mut file = Vec::new();
    if with_header & 1 == 1 {
        file.extend_from_slice(b"TIDE\x02\x00\x00\x00\x00\x00\x00\x00\x02\x00");
    }
    file.extend_from_slice(bytes);
    let len = file.len() as u64;
    if let Ok(info) = read_blocks(std::io::Cursor::new(&file), len) {
        assert!(info.types.len() + info.channels.len() <= file.len() / 12);
        for channel in &info.channels {
            assert!(channel.entries <= len / 20);
        }
    }
});
