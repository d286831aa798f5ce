//! The reference firmware for the Stagewise bridge: the control loop a robot controller runs, as a `no_std`,
//! no-alloc core ([`Firmware`] driving any [`Plant`]), and (feature `emulator`, on by default) a host emulator
//! that runs the same core over UDP with the simulator as its plant ([`cli`]: the `stagewise-emulator` binary and
//! `stagewise emulator`).
//!
//! Safety behaviour of the core:
//! - every frame is authenticated (HMAC-SHA256 with the pre-shared link key, a frame counter in it, a replay
//!   window); frames that fail are counted and never acted on, and never feed the watchdog;
//! - nothing moves before a session (a `Hello` answered with a session id, opened by the first authentic frame
//!   of it) and an `Arm`; an armed session cannot be taken over (`SessionBusy`);
//! - a command whose `seq` is not greater than the last seen one is ignored (stale or duplicate);
//! - no authentic frame of the session for `link_timeout_us` -> [`FirmwareState::Hold`] (brake, hold position)
//!   at the first control tick past the deadline; leaving `Hold` needs an explicit `Arm`, even after the link
//!   comes back; the same when the actor's step counter stops advancing for `stall_timeout_us`, when a sensor
//!   value is not finite, and on the host's protective stop;
//! - an operator `EStop` latches [`FirmwareState::EStopped`] until an explicit `ResetEStop` (never an `Arm`,
//!   never a new session);
//! - an armed command older than `command_timeout_us` stops motion (brake);
//! - position, joint speed and acceleration, tool-tip speed (vector norm) and acceleration limits are enforced
//!   here again, whatever the host checked.
//!
//! The core must not depend on `std`, an allocator, or Stagewise crates other than `stagewise-protocol`; the
//! emulator (std) adds `stagewise-core` (the `Env` trait) and `stagewise-sim` (the plant). Never the runtime.
// The crate is always `no_std` (the core cannot reach for std even when the emulator is built); the emulator
// module brings std in explicitly.
#![no_std]
#![forbid(unsafe_code)]

#[cfg(feature = "std")]
extern crate std;

#[cfg(feature = "emulator")]
pub mod cli;
mod core_loop;
#[cfg(feature = "emulator")]
pub mod emulator;
#[cfg(feature = "emulator")]
pub mod scene;

pub use core_loop::*;
