//! Stagewise host bridge (work in progress).
