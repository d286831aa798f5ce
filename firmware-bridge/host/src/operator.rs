//! Operator actions outside a run, blocking (each owns a small tokio runtime): clearing a latched e-stop.

use crate::bridge::{Bridge, BridgeConfig, BridgeError};
use crate::limits::Limits;
use crate::transport::Endpoint;
use stagewise_protocol::FirmwareState;

/// What [`reset_estop`] found and left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResetReport {
    /// The firmware's state before the reset (its first telemetry of the session).
    pub before: FirmwareState,
    /// Its state after (telemetry newer than the acknowledgement).
    pub after: FirmwareState,
}

/// Opens a session with the firmware at `endpoint` and clears a latched e-stop (`ResetEStop` until
/// acknowledged; idempotent when none is latched), then closes the session. Nothing moves: the next arm (a run's
/// env reset) allows motion again. The session is the verb's own, so a run still connected loses its session.
pub fn reset_estop(endpoint: &Endpoint, mut cfg: BridgeConfig) -> Result<ResetReport, BridgeError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let bridge = match Bridge::connect(endpoint, cfg.clone()).await {
            // Resetting never commands motion: any joint count will do.
            Err(BridgeError::JointMismatch { firmware, .. }) => {
                let n = usize::from(firmware);
                cfg.limits = Limits {
                    pos_min: vec![f32::NEG_INFINITY; n],
                    pos_max: vec![f32::INFINITY; n],
                    vel_max: vec![0.0; n],
                    acc_max: vec![0.0; n],
                    ..Limits::cartesian_default()
                };
                Bridge::connect(endpoint, cfg.clone()).await?
            }
            other => other?,
        };
        let before = bridge
            .telemetry()
            .map(|s| s.telemetry.state)
            .ok_or(BridgeError::NoTelemetry)?;
        bridge.reset_estop().await?;
        let after = bridge
            .next_telemetry(
                bridge.telemetry().map(|s| s.telemetry.seq).unwrap_or(0),
                cfg.reply_timeout * cfg.retries.max(1),
            )
            .await?
            .telemetry
            .state;
        bridge.close().await;
        Ok(ResetReport { before, after })
    })
}
