//! The validation stage's checks, from inline YAML specs.

use super::*;

fn parse(yaml: &str) -> CoordinationEnsemble {
    serde_saphyr::from_str(yaml).expect("test YAML parses")
}

const BASE: &str = "
apiVersion: baton.dev/v1alpha1
kind: CoordinationEnsemble
metadata: {name: demo, namespace: default, uid: u-1}
spec: {}
";

#[test]
fn defaults_fill_an_empty_spec() {
    let valid = validate(&parse(BASE), "baton:1").expect("valid");
    assert_eq!(valid.replicas, 3);
    assert_eq!(valid.image, "baton:1");
    assert_eq!(valid.min_session_timeout, "4s");
    assert_eq!(valid.max_session_timeout, "40s");
}

#[test]
fn a_name_must_leave_room_for_the_pods_revision_label() {
    let name = |n: usize| BASE.replace("name: demo", &format!("name: {}", "a".repeat(n)));
    assert!(validate(&parse(&name(MAX_NAME_LEN)), "i").is_ok());
    let refused = validate(&parse(&name(MAX_NAME_LEN + 1)), "i");
    assert!(
        matches!(refused, Err(InvalidSpec::NameTooLong(_))),
        "{refused:?}"
    );
}

#[test]
fn replicas_must_be_odd_and_at_most_seven() {
    for (n, ok) in [
        (1, true),
        (2, false),
        (3, true),
        (7, true),
        (9, false),
        (0, false),
    ] {
        let ce = parse(&BASE.replace("spec: {}", &format!("spec: {{replicas: {n}}}")));
        assert_eq!(validate(&ce, "i").is_ok(), ok, "replicas {n}");
    }
}

#[test]
fn sizes_and_durations_are_checked() {
    assert!(is_quantity("1Gi") && is_quantity("500M") && is_quantity("1.5Gi"));
    assert!(!is_quantity("0") && !is_quantity("Gi") && !is_quantity("1GB") && !is_quantity(""));
    let ce = parse(&BASE.replace("spec: {}", "spec: {storage: {size: lots}}"));
    assert_eq!(
        validate(&ce, "i"),
        Err(InvalidSpec::StorageSize("lots".into()))
    );
    let ce = parse(&BASE.replace("spec: {}", "spec: {sessionTimeout: {min: 10s, max: 2s}}"));
    assert!(matches!(
        validate(&ce, "i"),
        Err(InvalidSpec::SessionTimeoutBounds { .. })
    ));
    let ce = parse(&BASE.replace("spec: {}", "spec: {sessionTimeout: {min: 1h}}"));
    assert!(matches!(
        validate(&ce, "i"),
        Err(InvalidSpec::SessionTimeoutBounds { .. })
    ));
    let ce = parse(&BASE.replace(
        "spec: {}",
        "spec: {sessionTimeout: {min: 1.5s, max: 1m30s}}",
    ));
    let valid = validate(&ce, "i").expect("Go-style durations");
    // Passed on to the members as written, so a spec that did not change rolls nothing.
    assert_eq!(
        (
            valid.min_session_timeout.as_str(),
            valid.max_session_timeout.as_str()
        ),
        ("1.5s", "1m30s")
    );
    assert_eq!(
        duration("f", "2m", Duration::ZERO..=Duration::MAX),
        Ok(Duration::from_secs(120))
    );
}

#[test]
fn durations_the_members_or_sidecars_would_refuse_are_refused_with_an_example() {
    let refused = |spec: &str| {
        let ce = parse(&BASE.replace("spec: {}", spec));
        validate(&ce, "i").expect_err(spec).to_string()
    };
    // A bare number once meant seconds to baton-ensemble; no member could start with it now.
    let err = refused("spec: {sessionTimeout: {max: \"40\"}}");
    assert!(err.starts_with("spec.sessionTimeout.max: "), "{err}");
    assert!(err.contains("write 40s"), "{err}");
    let err = refused("spec: {sessionTimeout: {max: 25h}}");
    assert!(err.contains("from 0s to 24h"), "{err}");
    let err = refused("spec: {sessionTimeout: {min: 4 s}}");
    assert!(err.contains("1m30s"), "{err}");
    let err = refused("spec: {sidecar: {sessionTimeout: 30m}}");
    assert!(err.starts_with("spec.sidecar.sessionTimeout: "), "{err}");
    assert!(err.contains("from 1s to 10m"), "{err}");
    let err = refused("spec: {sidecar: {sessionTimeout: \"10\"}}");
    assert!(err.contains("write 10s"), "{err}");
}

#[test]
fn allowed_namespaces_are_names_never_wildcards() {
    let ce = parse(&BASE.replace(
        "spec: {}",
        "spec: {allowedNamespaces: [web, default, batch, web]}",
    ));
    let valid = validate(&ce, "i").expect("valid");
    assert_eq!(
        valid.allowed_namespaces,
        ["batch", "web"],
        "sorted, once, not its own"
    );
    assert_eq!(valid.served_namespaces(), ["default", "batch", "web"]);
    for bad in ["*", "", "Web", "a.b", "-a", "prod/*"] {
        let ce = parse(&BASE.replace(
            "spec: {}",
            &format!("spec: {{allowedNamespaces: [{bad:?}]}}"),
        ));
        assert_eq!(
            validate(&ce, "i"),
            Err(InvalidSpec::AllowedNamespace(bad.into())),
            "{bad:?}"
        );
    }
}

#[test]
fn an_image_is_required_somewhere() {
    assert_eq!(validate(&parse(BASE), ""), Err(InvalidSpec::NoImage));
    let ce = parse(&BASE.replace("spec: {}", "spec: {image: 'own:2'}"));
    assert_eq!(validate(&ce, "").map(|v| v.image), Ok("own:2".into()));
}

#[test]
fn a_backup_needs_one_target_a_schedule_and_sane_paths() {
    let with = |backup: &str| {
        let ce = parse(&BASE.replace("spec: {}", &format!("spec: {{backup: {backup}}}")));
        validate(&ce, "i").map(|v| v.backup.expect("a backup"))
    };
    let b = with("{schedule: '0 3 * * *', target: {pvc: {claimName: backups}}}").expect("ok");
    assert_eq!(b.keep, 7, "the default");
    assert!(!b.suspend);
    assert_eq!(
        b.target,
        Location::Pvc {
            claim_name: "backups".into(),
            path: String::new()
        }
    );
    let b = with("{schedule: '@daily', target: {pvc: {claimName: b, path: 'x//y'}}}");
    assert!(matches!(b, Err(InvalidSpec::Path { .. })), "{b:?}");
    let b = with("{schedule: '@daily', target: {pvc: {claimName: b, path: zk/daily}}}");
    assert_eq!(
        b.map(|b| b.target.describe()),
        Ok("pvc://b/zk/daily/".into())
    );
    let b = with("{schedule: '*/15 1-5 * JAN-jun MON,fri', keep: 3, target: {s3: {bucket: bkt, prefix: a/b, credentialsSecret: c}}}")
        .expect("ok");
    assert_eq!(
        b.target.describe(),
        "s3://bkt/a/b/",
        "the prefix gets its slash"
    );
    assert_eq!(b.keep, 3);
    for bad in ["/abs", "../up", "a/../b", "./a"] {
        let b = with(&format!(
            "{{schedule: '@daily', target: {{pvc: {{claimName: b, path: '{bad}'}}}}}}"
        ));
        assert!(matches!(b, Err(InvalidSpec::Path { .. })), "{bad}: {b:?}");
    }
    let both = "{schedule: '@daily', target: {pvc: {claimName: b}, s3: {bucket: bkt, credentialsSecret: c}}}";
    assert_eq!(with(both), Err(InvalidSpec::Target("spec.backup.target")));
    assert_eq!(
        with("{schedule: '@daily', target: {}}"),
        Err(InvalidSpec::Target("spec.backup.target"))
    );
    assert_eq!(
        with("{schedule: '@daily', keep: 0, target: {pvc: {claimName: b}}}"),
        Err(InvalidSpec::Keep(0))
    );
    let bad_claim = with("{schedule: '@daily', target: {pvc: {claimName: Backups}}}");
    assert!(matches!(bad_claim, Err(InvalidSpec::ObjectName { .. })));
    let bad_schedule = with("{schedule: '0 25 * * *', target: {pvc: {claimName: b}}}");
    let message = bad_schedule.map(|_| ()).unwrap_err().to_string();
    assert!(message.contains("hour: 25 is outside 0-23"), "{message}");
}

#[test]
fn cron_schedules_as_a_cron_job_takes_them() {
    for ok in [
        "0 3 * * *",
        "*/5 * * * *",
        "0 0 1,15 * ?",
        "30 2 * * sun",
        "0 0 1 jan-mar *",
        "0-59/10 0-23/2 1-31 1-12 0-6",
        "@hourly",
        "@weekly",
        "@annually",
    ] {
        assert_eq!(check_cron(ok), Ok(()), "{ok}");
    }
    for bad in [
        "",
        "* * * *",
        "* * * * * *",
        "60 * * * *",
        "* * 0 * *",
        "* * * 13 *",
        "* * * * 7",
        "5-1 * * * *",
        "*/0 * * * *",
        "a * * * *",
        "@fortnightly",
        "TZ=UTC 0 3 * * *",
    ] {
        assert!(check_cron(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn restore_from_is_taken_only_at_creation() {
    let spec = "spec: {restoreFrom: {s3: {bucket: bkt, key: prod/, credentialsSecret: c}}}";
    let fresh = parse(&BASE.replace("spec: {}", spec));
    let restore = validate(&fresh, "i")
        .expect("valid")
        .restore
        .expect("restore");
    assert!(restore.pending);
    assert_eq!(restore.source.describe(), "s3://bkt/prod/");
    // Refused from the start for another reason (nothing created): still new.
    let mut refused = fresh.clone();
    refused.status = Some(CoordinationEnsembleStatus {
        observed_generation: Some(1),
        ..Default::default()
    });
    assert!(validate(&refused, "i").is_ok());
    // Created from it, restored: the same source stays valid, the restore no longer pending.
    let mut created = fresh.clone();
    created.status = Some(CoordinationEnsembleStatus {
        selector: Some("x".into()),
        restore: Some(crate::crd::RestoreStatus {
            source: "s3://bkt/prod/".into(),
            completed_at: Some("2026-01-01T00:00:00Z".into()),
        }),
        ..Default::default()
    });
    let again = validate(&created, "i")
        .expect("valid")
        .restore
        .expect("restore");
    assert!(!again.pending);
    // Changed later: refused, naming both.
    let mut changed = created.clone();
    changed.spec = parse(&BASE.replace(
        "spec: {}",
        "spec: {restoreFrom: {pvc: {claimName: b, path: f.baton-backup}}}",
    ))
    .spec;
    assert_eq!(
        validate(&changed, "i"),
        Err(InvalidSpec::RestoreChanged {
            was: "s3://bkt/prod/".into(),
            now: "pvc://b/f.baton-backup".into()
        })
    );
    // Added to an ensemble created without it: refused.
    let mut added = fresh;
    added.status = Some(CoordinationEnsembleStatus {
        selector: Some("x".into()),
        ..Default::default()
    });
    assert_eq!(
        validate(&added, "i"),
        Err(InvalidSpec::RestoreAfterCreation)
    );
    let message = InvalidSpec::RestoreAfterCreation.to_string();
    assert!(message.contains("new CoordinationEnsemble"), "{message}");
    // Exactly one source; a key is required.
    for bad in [
        "{}",
        "{s3: {bucket: bkt, key: '', credentialsSecret: c}}",
        "{s3: {bucket: bkt, key: /abs, credentialsSecret: c}}",
    ] {
        let ce = parse(&BASE.replace("spec: {}", &format!("spec: {{restoreFrom: {bad}}}")));
        assert!(validate(&ce, "i").is_err(), "{bad}");
    }
}

#[test]
fn pod_labels_may_not_take_the_labels_the_operator_selects_by() {
    for key in RESERVED_POD_LABELS {
        let spec = BASE.replace(
            "spec: {}",
            &format!("spec: {{pods: {{labels: {{{key}: x}}}}}}"),
        );
        let refused = validate(&parse(&spec), "i");
        assert_eq!(
            refused,
            Err(InvalidSpec::ReservedPodLabel(key.into())),
            "{key}"
        );
    }
    let own = BASE.replace(
        "spec: {}",
        "spec: {pods: {labels: {team: a, app.kubernetes.io/part-of: shop}}}",
    );
    assert!(validate(&parse(&own), "i").is_ok());
}

#[test]
fn s3_without_a_credentials_secret_uses_the_pods_own_credentials() {
    let spec = BASE.replace(
        "spec: {}",
        "spec: {backup: {schedule: '@daily', target: {s3: {bucket: bkt}}}}",
    );
    let valid = validate(&parse(&spec), "i").expect("valid");
    let target = valid.backup.expect("backup").target;
    assert!(
        matches!(
            target,
            Location::S3 {
                credentials_secret: None,
                ..
            }
        ),
        "{target:?}"
    );
    let bad = BASE.replace(
        "spec: {}",
        "spec: {backup: {schedule: '@daily', target: {s3: {bucket: bkt, credentialsSecret: Bad_Name}}}}",
    );
    assert!(matches!(
        validate(&parse(&bad), "i"),
        Err(InvalidSpec::ObjectName { .. })
    ));
    for bad in [
        "{backup: {schedule: '@daily', target: {s3: {bucket: bkt, caConfigMap: Bad_Name}}}}",
        "{restoreFrom: {s3: {bucket: bkt, key: k, caConfigMap: -ca}}}",
    ] {
        let bad = BASE.replace("spec: {}", &format!("spec: {bad}"));
        assert!(
            matches!(
                validate(&parse(&bad), "i"),
                Err(InvalidSpec::ObjectName { field, .. }) if field.ends_with(".s3.caConfigMap")
            ),
            "{bad}"
        );
    }
}

#[test]
fn the_crd_pattern_accepts_exactly_the_grammar() {
    // The API server checks the pattern before the operator sees a spec: it must refuse what
    // baton_duration refuses, and never what it reads.
    let pattern = regex::Regex::new(crate::crd::DURATION_PATTERN).expect("a valid pattern");
    let read = [
        "0",
        "0s",
        "500ms",
        "30s",
        "1m30s",
        "2h",
        "1.5s",
        ".5s",
        "5.s",
        "1h2m3s4ms",
        "30s1m",
    ];
    let refused = [
        "", "10", "1.5", "s", "-1s", "+1s", " 10s", "10s ", "10 s", "10S", "1d", "10us", "1e3s",
        "1m30", "1.2.3s", ".s", "00",
    ];
    for text in read {
        assert!(baton_duration::parse(text).is_ok(), "{text}");
        assert!(pattern.is_match(text), "the pattern refuses {text:?}");
    }
    for text in refused {
        assert!(baton_duration::parse(text).is_err(), "{text}");
        assert!(!pattern.is_match(text), "the pattern accepts {text:?}");
    }
}
