//! `spec.limits`, checked again (a client may bypass the CRD schema, e.g. an older CRD) and
//! against `spec.storage.size`, which the schema cannot compare it with.

use crate::crd::LimitsSpec;
use crate::ensemble::SettingsValues;

use super::InvalidSpec;

/// `spec.limits`, checked: what the ensemble is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The replicated settings the operator keeps the ensemble at (`checkIdentities` always on:
    /// pods of one namespace never reach another's `/baton/<ns>`).
    pub settings: SettingsValues,
    /// Each member's `--min-free-disk-bytes`.
    pub min_free_disk_bytes: u64,
}

/// The ranges of the CRD schema (`crd::LimitsSpec`), by field.
const RANGES: [(&str, i64, i64); 6] = [
    ("spec.limits.namespaceZnodes", 100, 100_000_000),
    ("spec.limits.namespaceBytes", 1 << 20, 64 << 30),
    ("spec.limits.sharedZnodes", 1_000, 100_000_000),
    ("spec.limits.sharedBytes", 16 << 20, 64 << 30),
    ("spec.limits.ephemeralsPerSession", 10, 1_000_000),
    ("spec.limits.minFreeDiskBytes", 0, 1 << 40),
];

pub(super) fn limits(spec: &LimitsSpec, storage_size: &str) -> Result<Limits, InvalidSpec> {
    let values = [
        spec.namespace_znodes,
        spec.namespace_bytes,
        spec.shared_znodes,
        spec.shared_bytes,
        spec.ephemerals_per_session,
        spec.min_free_disk_bytes,
    ];
    let mut checked = [0u64; 6];
    for (i, ((field, min, max), value)) in RANGES.iter().zip(values).enumerate() {
        if !(*min..=*max).contains(&value) {
            return Err(InvalidSpec::Limit {
                field,
                value,
                min: *min,
                max: *max,
            });
        }
        checked[i] = value as u64;
    }
    let [
        namespace_znodes,
        namespace_bytes,
        shared_znodes,
        shared_bytes,
        ephemerals,
        min_free,
    ] = checked;
    // The alarm clears once twice the watermark is free: on a smaller volume it never would.
    if let Some(volume) = quantity_bytes(storage_size)
        && u128::from(min_free) * 2 >= volume
    {
        return Err(InvalidSpec::Watermark {
            min_free_disk_bytes: min_free,
            size: storage_size.to_string(),
        });
    }
    Ok(Limits {
        settings: SettingsValues {
            check_identities: true,
            namespace_znodes,
            namespace_bytes,
            shared_znodes,
            shared_bytes,
            ephemerals_per_session: ephemerals,
        },
        min_free_disk_bytes: min_free,
    })
}

/// Bytes of a Kubernetes quantity as `spec.storage.size` takes it (`1Gi`, `1.5G`, `500000`);
/// `None` if it is not one. A fraction of a byte is rounded up, as the API server does.
pub fn quantity_bytes(s: &str) -> Option<u128> {
    const SUFFIXES: [(&str, u128); 12] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("Ei", 1 << 60),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
        ("E", 1_000_000_000_000_000_000),
    ];
    let (number, unit) = SUFFIXES
        .iter()
        .find_map(|(suffix, unit)| Some((s.strip_suffix(suffix)?, *unit)))
        .unwrap_or((s, 1));
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) || fraction.len() > 9 {
        return None;
    }
    let scale = 10u128.pow(fraction.len() as u32);
    let mantissa: u128 = format!("{whole}{fraction}").parse().ok()?;
    mantissa
        .checked_mul(unit)?
        .checked_add(scale - 1)
        .map(|n| n / scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_in_bytes() {
        assert_eq!(quantity_bytes("1Gi"), Some(1 << 30));
        assert_eq!(quantity_bytes("1.5Gi"), Some(3 << 29));
        assert_eq!(quantity_bytes("500M"), Some(500_000_000));
        assert_eq!(quantity_bytes("1000"), Some(1000));
        assert_eq!(quantity_bytes("0.5"), Some(1));
        assert_eq!(quantity_bytes("Gi"), None);
        assert_eq!(quantity_bytes("1x"), None);
        assert_eq!(quantity_bytes("-1Gi"), None);
    }

    #[test]
    fn defaults_pass_and_turn_identities_on() {
        let limits = limits(&LimitsSpec::default(), "1Gi").expect("the defaults are valid");
        assert!(limits.settings.check_identities);
        assert_eq!(limits.settings.namespace_bytes, 64 << 20);
        assert_eq!(limits.settings.shared_bytes, 256 << 20);
        assert_eq!(limits.min_free_disk_bytes, 64 << 20);
    }

    #[test]
    fn out_of_range_and_unclearable_watermarks_are_refused() {
        let spec = LimitsSpec {
            namespace_bytes: 1000,
            ..LimitsSpec::default()
        };
        let err = limits(&spec, "1Gi").unwrap_err();
        assert!(
            err.to_string().contains("spec.limits.namespaceBytes"),
            "{err}"
        );
        // 64 MiB twice is the whole 128Mi volume: the alarm could never clear.
        let err = limits(&LimitsSpec::default(), "128Mi").unwrap_err();
        assert!(err.to_string().contains("minFreeDiskBytes"), "{err}");
        assert!(limits(&LimitsSpec::default(), "129Mi").is_ok());
        let off = LimitsSpec {
            min_free_disk_bytes: 0,
            ..LimitsSpec::default()
        };
        assert_eq!(limits(&off, "1Mi").map(|l| l.min_free_disk_bytes), Ok(0));
    }
}
