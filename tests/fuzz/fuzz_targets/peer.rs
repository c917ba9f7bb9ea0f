//! Everything a member reads from another member's connection, after the TLS handshake: the
//! first byte picks the decoder (hello, message-lane frame, snapshot-lane frame, control
//! payload, forwarded write as the leader checks it), the rest is its input. Nothing may
//! panic, overflow the stack (protobuf groups, RUSTSEC-2024-0437) or hang.
#![no_main]

use baton_ensemble::fuzzing;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, input)) = data.split_first() else {
        return;
    };
    match which % 5 {
        0 => drop(fuzzing::hello(input)),
        1 => drop(fuzzing::message_lane(input)),
        2 => drop(fuzzing::snapshot_lane(input)),
        3 => drop(fuzzing::control(input)),
        _ => drop(fuzzing::forwarded_write(input)),
    }
});
