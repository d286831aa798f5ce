//! Mutual TLS and access control across real processes: a zenoh router listening on `tls/127.0.0.1:PORT` with
//! certificates made at test time (a CA; a router certificate it signs for 127.0.0.1; client certificates whose
//! common names are `stagewise-actor`, `stagewise-learner` and `stagewise-intruder`), the actor (this process)
//! and learners and intruders (`stagewise-stream-probe` processes) joining it through zenoh JSON5 config files,
//! as `stagewise run --zenoh-config FILE` does. The config files are the templates README.md ("Many machines")
//! and SECURITY.md ("Network") point to, `docs/zenoh/{router,actor,learner}.json5`, read as written with the
//! test's paths and address substituted.

use crate::common;

use common::*;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use stagewise_stream::{Encoded, Keys, Node, PublisherOptions, StreamConfig};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

/// A CA: its certificate (PEM) and the issuer that signs with its key.
fn new_ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().expect("CA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params
        .self_signed(&key)
        .expect("self-signed CA certificate");
    (cert.pem(), Issuer::new(params, key))
}

/// A certificate (PEM) and its private key (PEM) signed by `issuer`: a router's (server authentication, valid
/// for 127.0.0.1 and localhost) or a client's (client authentication, common name `cn`).
fn leaf_cert(issuer: &Issuer<'static, KeyPair>, cn: &str, server: bool) -> (String, String) {
    let key = KeyPair::generate().expect("key");
    let names = if server {
        vec!["127.0.0.1".to_string(), "localhost".to_string()]
    } else {
        Vec::new()
    };
    let mut params = CertificateParams::new(names).expect("params");
    params.distinguished_name.push(DnType::CommonName, cn);
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![if server {
        ExtendedKeyUsagePurpose::ServerAuth
    } else {
        ExtendedKeyUsagePurpose::ClientAuth
    }];
    let cert = params.signed_by(&key, issuer).expect("certificate");
    (cert.pem(), key.serialize_pem())
}

fn write(path: &Path, text: &str) -> PathBuf {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    path.to_path_buf()
}

/// The test's certificates in one directory, named as the templates name them under `/etc/stagewise/`.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("stagewise-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let (ca_pem, ca) = new_ca("stagewise test CA");
        write(&dir.join("ca.pem"), &ca_pem);
        let (cert, key) = leaf_cert(&ca, "stagewise test router", true);
        write(&dir.join("router-cert.pem"), &cert);
        write(&dir.join("router-key.pem"), &key);
        for who in ["actor", "learner", "intruder"] {
            let (cert, key) = leaf_cert(&ca, &format!("stagewise-{who}"), false);
            write(&dir.join(format!("{who}-cert.pem")), &cert);
            write(&dir.join(format!("{who}-key.pem")), &key);
        }
        // A learner certificate from a CA the router does not trust, and that CA.
        let (other_pem, other) = new_ca("another CA");
        write(&dir.join("other-ca.pem"), &other_pem);
        let (cert, key) = leaf_cert(&other, "stagewise-learner", false);
        write(&dir.join("foreign-cert.pem"), &cert);
        write(&dir.join("foreign-key.pem"), &key);
        Pki { dir }
    }

    /// `docs/zenoh/<name>.json5` as written, with `/etc/stagewise/` replaced by this directory, the router's
    /// address by 127.0.0.1:`port`, and then each `(from, to)` of `edits`; written to `<dir>/<out>.json5`.
    fn config(&self, name: &str, out: &str, port: u16, edits: &[(&str, &str)]) -> PathBuf {
        let src =
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../docs/zenoh/{name}.json5"));
        let text = std::fs::read_to_string(&src)
            .unwrap_or_else(|e| panic!("reading {}: {e}", src.display()));
        let dir = serde_json::Value::String(format!("{}/", self.dir.display())).to_string();
        let mut text = replace_all(&text, "/etc/stagewise/", dir.trim_matches('"'));
        let endpoint = format!("tls/127.0.0.1:{port}");
        text = match name {
            "router" => replace_all(&text, "tls/0.0.0.0:7447", &endpoint),
            _ => replace_all(&text, "tls/10.0.0.1:7447", &endpoint),
        };
        for (from, to) in edits {
            text = replace_all(&text, from, to);
        }
        write(&self.dir.join(format!("{out}.json5")), &text)
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `text` with every `from` replaced; panics when there is none (the template changed under the test).
fn replace_all(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "the template has no {from:?}");
    text.replace(from, to)
}

/// What `stagewise run --zenoh-config FILE` opens (src/cmd/zenoh_args.rs: only the file is set).
fn from_file(path: &Path) -> StreamConfig {
    StreamConfig {
        config_file: Some(path.to_path_buf()),
        ..StreamConfig::default()
    }
}

fn arg(p: &Path) -> String {
    p.display().to_string()
}

/// A probe that puts (`--put what`) with `config`; returns its `PUT ...` line once it is done.
fn put(config: &Path, robot: &str, what: &str, first: u64, count: u64, wait_s: u64) -> String {
    let (first, count, wait_s) = (first.to_string(), count.to_string(), wait_s.to_string());
    let mut p = Probe::spawn(&[
        "--zenoh-config",
        &arg(config),
        "--robot",
        robot,
        "--put",
        what,
        "--first",
        &first,
        "--count",
        &count,
        "--wait-s",
        &wait_s,
    ]);
    let lines = p.lines_until_done(Duration::from_secs(60));
    assert_eq!(
        lines.last().map(String::as_str),
        Some(format!("DONE ok={count} err=0").as_str()),
        "{lines:?}"
    );
    lines
        .iter()
        .find(|l| l.starts_with("PUT "))
        .cloned()
        .unwrap_or_else(|| panic!("no PUT line: {lines:?}"))
}

#[test]
fn actor_and_learner_talk_through_a_mutual_tls_router() {
    let pki = Pki::new("mtls");
    let port = free_port();
    let router_cfg = pki.config("router", "router", port, &[]);
    let actor_cfg = pki.config("actor", "actor", port, &[]);
    let learner_cfg = pki.config("learner", "learner", port, &[]);

    let router = Node::open(&from_file(&router_cfg)).expect("router listening on tls/");
    let actor = Node::open(&from_file(&actor_cfg)).expect("actor client over mutual TLS");
    let keys = Keys::new("tls-arm").expect("keys");
    let publisher = actor
        .publisher(&keys, PublisherOptions::default())
        .expect("publisher");
    const N: u64 = 20;
    let n = N.to_string();
    let learner_arg = arg(&learner_cfg);
    let mut probe = Probe::spawn(&[
        "--robot",
        "tls-arm",
        "--zenoh-config",
        &learner_arg,
        "--count",
        &n,
        "--timeout-s",
        "120",
    ]);
    assert!(
        publisher.wait_for_subscribers(LONG),
        "the probe's subscriber never matched through the TLS router"
    );
    for step in 0..N {
        publisher
            .publish_transition(Encoded::new(transition("tls-arm", step, true)).expect("encode"));
    }
    assert!(publisher.flush(LONG), "queue did not drain");
    let lines = probe.lines_until_done(Duration::from_secs(120));
    let got: Vec<&String> = lines.iter().filter(|l| l.starts_with("T ")).collect();
    assert_eq!(got.len() as u64, N, "lines: {lines:?}");
    for (step, line) in got.iter().enumerate() {
        let want = transition("tls-arm", step as u64, true);
        assert_eq!(
            field(line, "step"),
            Some(step.to_string().as_str()),
            "{line}"
        );
        let views: Vec<String> = want
            .next_obs
            .as_ref()
            .expect("obs")
            .images
            .iter()
            .map(|(n, t)| format!("{n}:96x96x3:{}", checksum(t.data())))
            .collect();
        assert_eq!(
            field(line, "next_views"),
            Some(views.join(",").as_str()),
            "{line}"
        );
    }
    assert_eq!(
        lines.last().map(String::as_str),
        Some(format!("DONE ok={N} err=0").as_str())
    );
    assert_eq!(
        actor.connected_count(),
        1,
        "the actor talks to the router only"
    );

    // Refused: a client without a client certificate (the one-way TLS client: it trusts the router's CA and
    // shows nothing) ...
    let anonymous = pki.config(
        "learner",
        "anonymous",
        port,
        &[
            ("enable_mtls: true,", ""),
            (
                &format!(
                    "connect_certificate: \"{}/learner-cert.pem\",",
                    pki.dir.display()
                ),
                "",
            ),
            (
                &format!(
                    "connect_private_key: \"{}/learner-key.pem\",",
                    pki.dir.display()
                ),
                "",
            ),
        ],
    );
    assert!(!std::fs::read_to_string(&anonymous)
        .unwrap()
        .contains("connect_certificate"));
    let err = Node::open(&from_file(&anonymous))
        .expect_err("a client without a client certificate must not connect");
    assert!(err.to_string().contains("opening a session"), "{err}");
    // ... a client whose certificate another CA signed ...
    let foreign = pki.config(
        "learner",
        "foreign",
        port,
        &[
            ("learner-cert.pem", "foreign-cert.pem"),
            ("learner-key.pem", "foreign-key.pem"),
        ],
    );
    let err = Node::open(&from_file(&foreign))
        .expect_err("a client certificate from another CA must not be accepted");
    assert!(err.to_string().contains("opening a session"), "{err}");
    // ... and a client that does not trust the router's CA (the router's certificate is checked).
    let untrusting = pki.config("learner", "untrusting", port, &[("ca.pem", "other-ca.pem")]);
    let err = Node::open(&from_file(&untrusting))
        .expect_err("a client that does not trust the router's CA must not connect");
    assert!(err.to_string().contains("opening a session"), "{err}");
    // The router still takes a client with the right certificate (which sees the actor's liveliness token).
    let learner = Node::open(&from_file(&learner_cfg)).expect("second learner over mutual TLS");
    assert!(learner
        .wait_for_alive(&keys, LONG)
        .expect("liveliness query"));
    drop(router);
}

/// The router's access control (docs/zenoh/router.json5): a client with a valid certificate but another
/// identity connects and can neither put policies or transitions nor receive anything; the learner cannot put
/// transitions, the actor cannot put policies; the learner's policy and the actor's transitions arrive.
#[test]
fn access_control_lets_only_the_learner_put_policies_and_only_the_actor_put_transitions() {
    let pki = Pki::new("acl");
    let port = free_port();
    let robot = "acl-arm";
    let router_cfg = pki.config("router", "router", port, &[]);
    let actor_cfg = pki.config("actor", "actor", port, &[]);
    let learner_cfg = pki.config("learner", "learner", port, &[]);
    let intruder_cfg = pki.config(
        "learner",
        "intruder",
        port,
        &[
            ("learner-cert.pem", "intruder-cert.pem"),
            ("learner-key.pem", "intruder-key.pem"),
        ],
    );

    let _router = Node::open(&from_file(&router_cfg)).expect("router");
    let actor = Node::open(&from_file(&actor_cfg)).expect("actor");
    let keys = Keys::new(robot).expect("keys");
    let publisher = actor
        .publisher(&keys, PublisherOptions::default())
        .expect("publisher");
    let (_policy_sub, policies) = actor.subscribe_policy_channel(&keys).expect("policy sub");

    const N: u64 = 10;
    let n = N.to_string();
    let (learner_arg, intruder_arg) = (arg(&learner_cfg), arg(&intruder_cfg));
    let mut learner = Probe::spawn(&[
        "--robot",
        robot,
        "--zenoh-config",
        &learner_arg,
        "--count",
        &n,
        "--timeout-s",
        "120",
    ]);
    // The intruder is let in (its certificate is valid: READY comes after its session opened) and subscribes.
    let started = Instant::now();
    let mut eavesdropper = Probe::spawn(&[
        "--robot",
        robot,
        "--zenoh-config",
        &intruder_arg,
        "--timeout-s",
        "20",
    ]);
    assert!(
        publisher.wait_for_subscribers(LONG),
        "the learner's subscriber never matched through the router"
    );

    // Refused puts, before anything legitimate is sent (each probe has finished when `put` returns).
    let intruder_t = put(&intruder_cfg, robot, "transition", 1000, 3, 2);
    let intruder_p = put(&intruder_cfg, robot, "policy", 5, 1, 2);
    // The learner and a second actor session see the subscribers (declarations are allowed), so their puts
    // leave them and are dropped by the router's put rules.
    let learner_t = put(&learner_cfg, robot, "transition", 2000, 3, 30);
    assert!(learner_t.ends_with("matched=yes"), "{learner_t}");
    let actor_p = put(&actor_cfg, robot, "policy", 6, 1, 30);
    assert!(actor_p.ends_with("matched=yes"), "{actor_p}");

    // The actor's transitions arrive at the learner, and nothing else does.
    for step in 0..N {
        publisher.publish_transition(Encoded::new(transition(robot, step, false)).expect("encode"));
    }
    assert!(publisher.flush(LONG), "queue did not drain");
    let lines = learner.lines_until_done(Duration::from_secs(120));
    let steps: Vec<&str> = lines
        .iter()
        .filter(|l| l.starts_with("T "))
        .filter_map(|l| field(l, "step"))
        .collect();
    let want: Vec<String> = (0..N).map(|s| s.to_string()).collect();
    assert_eq!(
        steps, want,
        "the learner got exactly the actor's transitions ({intruder_t}; {learner_t}): {lines:?}"
    );

    // The learner's policy arrives at the actor; the intruder's (version 5) and the actor's own (6) never did.
    let learner_p = put(&learner_cfg, robot, "policy", 7, 1, 30);
    assert!(learner_p.ends_with("matched=yes"), "{learner_p}");
    let first = policies
        .recv_timeout(LONG)
        .expect("the learner's policy reaches the actor")
        .expect("a valid policy");
    assert_eq!(
        first.version, 7,
        "only the learner's policy arrives ({intruder_p}; {actor_p})"
    );
    std::thread::sleep(Duration::from_secs(1));
    let late: Vec<u64> = policies
        .try_iter()
        .filter_map(|p| p.ok().map(|p| p.version))
        .collect();
    assert!(late.is_empty(), "policies that should not arrive: {late:?}");

    // The intruder's subscriber received nothing of the actor's transitions.
    let heard = eavesdropper.lines_until_done(
        Duration::from_secs(30).saturating_sub(started.elapsed()) + Duration::from_secs(10),
    );
    assert_eq!(
        heard.last().map(String::as_str),
        Some("DONE ok=0 err=0"),
        "{heard:?}"
    );
}
