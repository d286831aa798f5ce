//! Arbitrary bytes into the streaming decoder and into `decode_frame`: must never panic or hang, and anything
//! that decodes must re-encode to a frame that decodes to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stagewise_protocol::{decode_frame, encode_frame, FrameDecoder, MAX_FRAME};

fuzz_target!(|data: &[u8]| {
    let mut dec = FrameDecoder::new();
    dec.feed(data, |r| {
        if let Ok(m) = r {
            let mut buf = [0u8; MAX_FRAME];
            if let Ok(n) = encode_frame(&m, &mut buf) {
                let mut again = FrameDecoder::new();
                again.feed(&buf[..n], |r2| assert!(r2.is_ok()));
            }
        }
    });
    let mut body: Vec<u8> = data.iter().copied().filter(|&b| b != 0).collect();
    let _ = decode_frame(&mut body);
});
