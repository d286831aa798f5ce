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
