//! TLS across real processes: a zenoh router listening on `tls/127.0.0.1:PORT` with certificates made at test
//! time (a CA, and a router certificate it signs for 127.0.0.1), the actor's publisher (this process) and a
//! learner (the `stagewise-stream-probe` binary, another process) joining it through zenoh JSON5 config files,
//! as `stagewise run --zenoh-config FILE` does. The config files are the ones README.md ("Many machines")
//! shows, with loopback addresses and test paths.

use crate::common;

use common::*;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use stagewise_stream::{Keys, Node, PublisherOptions, StreamConfig};
use std::path::{Path, PathBuf};
use std::time::Duration;

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

/// The router's certificate (PEM) and private key (PEM), valid for 127.0.0.1 and localhost.
fn router_cert(issuer: &Issuer<'static, KeyPair>) -> (String, String) {
    let key = KeyPair::generate().expect("router key");
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .expect("router params");
    params
        .distinguished_name
        .push(DnType::CommonName, "stagewise test router");
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, issuer).expect("router certificate");
    (cert.pem(), key.serialize_pem())
}

fn json(path: &Path) -> String {
    serde_json::Value::String(path.display().to_string()).to_string()
}

fn write(path: &Path, text: &str) -> PathBuf {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    path.to_path_buf()
}

/// The router's config (README.md, "Many machines": `router.json5`).
fn router_config(dir: &Path, port: u16, cert: &Path, key: &Path) -> PathBuf {
    write(
        &dir.join("router.json5"),
        &format!(
            r#"{{
  mode: "router",
  listen: {{ endpoints: ["tls/127.0.0.1:{port}"] }},
  scouting: {{ multicast: {{ enabled: false }} }},
  transport: {{ link: {{ tls: {{ listen_certificate: {}, listen_private_key: {} }} }} }},
}}
"#,
            json(cert),
            json(key)
        ),
    )
}

/// An actor's or learner's config (README.md, "Many machines": `client.json5`).
fn client_config(path: &Path, port: u16, ca: &Path) -> PathBuf {
    write(
        path,
        &format!(
            r#"{{
  mode: "client",
  connect: {{ endpoints: ["tls/127.0.0.1:{port}"] }},
  scouting: {{ multicast: {{ enabled: false }} }},
  transport: {{ link: {{ tls: {{ root_ca_certificate: {} }} }} }},
}}
"#,
            json(ca)
        ),
    )
}

/// What `stagewise run --zenoh-config FILE` opens (src/cmd/zenoh_args.rs: only the file is set).
fn from_file(path: &Path) -> StreamConfig {
    StreamConfig {
        config_file: Some(path.to_path_buf()),
        ..StreamConfig::default()
    }
}

#[test]
fn actor_and_learner_talk_through_a_tls_router() {
    let dir = std::env::temp_dir().join(format!("stagewise-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (ca_pem, issuer) = new_ca("stagewise test CA");
    let (cert_pem, key_pem) = router_cert(&issuer);
    let ca = write(&dir.join("ca.pem"), &ca_pem);
    let cert = write(&dir.join("router-cert.pem"), &cert_pem);
    let key = write(&dir.join("router-key.pem"), &key_pem);
    let port = free_port();
    let router_cfg = router_config(&dir, port, &cert, &key);
    let client_cfg = client_config(&dir.join("client.json5"), port, &ca);

    let router = Node::open(&from_file(&router_cfg)).expect("router listening on tls/");
    let actor = Node::open(&from_file(&client_cfg)).expect("actor client over TLS");
    let keys = Keys::new("tls-arm").expect("keys");
    let publisher = actor
        .publisher(&keys, PublisherOptions::default())
        .expect("publisher");
    const N: u64 = 20;
    let n = N.to_string();
    let client_arg = client_cfg.display().to_string();
    let mut probe = Probe::spawn(&[
        "--robot",
        "tls-arm",
        "--zenoh-config",
        &client_arg,
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
        publisher.publish_transition(transition("tls-arm", step, true));
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

    // The router's certificate is checked: a client that trusts another CA is refused.
    let (other_ca_pem, _) = new_ca("another CA");
    let other_ca = write(&dir.join("other-ca.pem"), &other_ca_pem);
    let untrusting = client_config(&dir.join("untrusting.json5"), port, &other_ca);
    let err = Node::open(&from_file(&untrusting))
        .expect_err("a client that does not trust the router's CA must not connect");
    assert!(err.to_string().contains("opening a session"), "{err}");
    // ... while the router still takes a client that trusts its CA (which sees the actor's liveliness token).
    let learner = Node::open(&from_file(&client_cfg)).expect("second client over TLS");
    assert!(learner
        .wait_for_alive(&keys, LONG)
        .expect("liveliness query"));
    drop(router);
    let _ = std::fs::remove_dir_all(&dir);
}
