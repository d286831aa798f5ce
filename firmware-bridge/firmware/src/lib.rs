//! Reference firmware for the Stagewise bridge (work in progress). Must not depend on std in its core.
#![no_std]
