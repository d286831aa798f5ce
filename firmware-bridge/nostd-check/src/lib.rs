//! A `#![no_std]` crate without `alloc` that uses the protocol and the firmware core the way a microcontroller
//! build would: fixed buffers on the stack, one control tick. If either crate (or one of its dependencies, with
//! the features the workspace gives them) needed `std` or an allocator in a way that leaks into its API, this
//! crate would not compile. Tests (`cargo test -p stagewise-nostd-check`) run [`roundtrip`] and [`one_tick`].
//!
//! Only the host target is installed on the build machines, so this is a compile check against `core`, not a
//! cross-build; with a bare-metal target installed, `cargo build -p stagewise-nostd-check --target
//! thumbv7em-none-eabihf` is the stronger check. Must not depend on anything but the protocol and firmware crates.
#![no_std]
#![forbid(unsafe_code)]

pub use stagewise_firmware as firmware;
pub use stagewise_protocol as protocol;

use firmware::{Firmware, FirmwareConfig, KinematicPlant};
use protocol::{Direction, FrameDecoder, Heartbeat, LinkKey, Message, Sender, KEY_LEN, MAX_FRAME};

/// Seals a heartbeat (HMAC-SHA256 tag, frame counter) into a stack buffer and decodes and authenticates it
/// back with the streaming decoder; a decoder with another key must refuse it.
pub fn roundtrip(seq: u32) -> bool {
    let key = LinkKey::new(&[7u8; KEY_LEN]);
    let msg = Message::Heartbeat(Heartbeat {
        seq,
        time_us: 7,
        actor_step: 1,
    });
    let mut buf = [0u8; MAX_FRAME];
    let mut tx = Sender::new(key.clone(), Direction::HostToFirmware);
    let Ok(n) = tx.seal(9, &msg, &mut buf) else {
        return false;
    };
    let mut dec = FrameDecoder::new(key, Direction::HostToFirmware);
    let mut ok = false;
    dec.feed(&buf[..n], |r| {
        ok = matches!(r, Ok(ref f) if f.message == msg)
    });
    let mut other = FrameDecoder::new(LinkKey::new(&[8u8; KEY_LEN]), Direction::HostToFirmware);
    let mut refused = false;
    other.feed(&buf[..n], |r| refused = r.is_err());
    ok && refused
}

/// Runs one firmware control tick on the kinematic plant; returns the telemetry state (None: no session yet).
pub fn one_tick() -> Option<protocol::FirmwareState> {
    let mut fw = Firmware::new(
        FirmwareConfig::cartesian_1khz(),
        LinkKey::new(&[7u8; KEY_LEN]),
        [1; 16],
    );
    let mut plant = KinematicPlant::new([0.0, 0.0, 0.1]);
    fw.tick(1000, &mut plant).map(|t| t.state)
}

#[cfg(test)]
mod tests {
    #[test]
    fn core_only_code_runs() {
        assert!(super::roundtrip(3));
        assert_eq!(super::one_tick(), None);
    }
}
