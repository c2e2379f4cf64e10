//! The operator's own pods (`--operator-bin`): a pod whose container runs the operator image is
//! run as the locally built operator binary, so that an install from the shipped manifests
//! (kustomize or the Helm chart) really runs the operator the manifests describe.
//!
//! A container runtime would give the process the image, a network namespace and the
//! ServiceAccount's projected token with `KUBERNETES_SERVICE_HOST`. Here the process gets: the
//! container's `args` (the image's `CMD ["run"]` when it has none) and env (plain values and
//! the downward-API fields the podlet resolves), its `0.0.0.0` listen address rewritten to the
//! pod's loopback IP (what its own network namespace would make of it), and a kubeconfig
//! (`KUBECONFIG`) holding a token of the pod's ServiceAccount from the TokenRequest API, bound
//! to the pod: it stands in for the in-cluster config, with exactly the ServiceAccount's RBAC.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// The operator's `--metrics-addr` and its env variable: the one listener it opens.
const METRICS_FLAG: &str = "--metrics-addr";
const METRICS_ENV: &str = "MAREKVS_OPERATOR_METRICS_ADDR";
/// The operator's default listen address (`run --help`).
const DEFAULT_METRICS_PORT: u16 = 8080;
/// The image's `CMD`, used when the container gives no `args`.
const IMAGE_CMD: &str = "run";

/// Whether `image` is the operator's: its repository (tag and digest dropped) ends with
/// `marekvs-operator`, e.g. `ghcr.io/marekvs/marekvs-operator:0.1.0`.
pub fn is_operator_image(image: &str) -> bool {
    let without_digest = image.split('@').next().unwrap_or(image);
    // A ':' after the last '/' starts the tag (one before it is a registry port).
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    let name = last.split(':').next().unwrap_or(last);
    name == "marekvs-operator"
}

/// The tag of an image reference (`…/marekvs-operator:0.1.0` → `0.1.0`), digest dropped.
pub fn image_tag(image: &str) -> Option<&str> {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    last.split_once(':').map(|(_, tag)| tag)
}

/// The binary that runs a pod of operator image `image`: the one given for its tag (an older
/// build, for the upgrade test), else the default.
pub fn binary_for<'a>(
    image: &str,
    default: Option<&'a Path>,
    by_tag: &'a BTreeMap<String, PathBuf>,
) -> Option<&'a Path> {
    image_tag(image)
        .and_then(|t| by_tag.get(t))
        .map(PathBuf::as_path)
        .or(default)
}

/// `TAG=PATH`, as `--operator-bin-for-tag` takes it.
pub fn parse_tag_binary(text: &str) -> Result<(String, PathBuf), String> {
    match text.split_once('=') {
        Some((tag, path)) if !tag.is_empty() && !path.is_empty() => {
            Ok((tag.to_string(), PathBuf::from(path)))
        }
        _ => Err(format!("{text:?} is not TAG=PATH")),
    }
}

/// The operator's arguments and env with its listen address on the pod IP: a `0.0.0.0` (or
/// absent, so `0.0.0.0:8080`) address becomes `<ip>:<port>`; a loopback one is kept; any other
/// is refused, as the harness listens on 127.0.0.0/8 only.
pub fn on_pod_ip(
    args: &[String],
    env: &BTreeMap<String, String>,
    ip: Ipv4Addr,
) -> Result<(Vec<String>, BTreeMap<String, String>), String> {
    let mut args: Vec<String> = if args.is_empty() {
        vec![IMAGE_CMD.to_string()]
    } else {
        args.to_vec()
    };
    let mut env = env.clone();
    let mut set_by_args = false;
    let mut i = 0;
    while i < args.len() {
        let value_at = if let Some(v) = args[i].strip_prefix(&format!("{METRICS_FLAG}=")) {
            Some((i, format!("{METRICS_FLAG}="), v.to_string()))
        } else if args[i] == METRICS_FLAG && i + 1 < args.len() {
            i += 1;
            Some((i, String::new(), args[i].clone()))
        } else {
            None
        };
        if let Some((at, prefix, value)) = value_at {
            args[at] = format!("{prefix}{}", rewrite(&value, ip)?);
            set_by_args = true;
        }
        i += 1;
    }
    if !set_by_args {
        let value = env
            .get(METRICS_ENV)
            .cloned()
            .unwrap_or_else(|| format!("0.0.0.0:{DEFAULT_METRICS_PORT}"));
        env.insert(METRICS_ENV.into(), rewrite(&value, ip)?);
    }
    Ok((args, env))
}

fn rewrite(value: &str, ip: Ipv4Addr) -> Result<String, String> {
    match value.parse::<SocketAddr>() {
        Ok(SocketAddr::V4(a)) if a.ip().is_unspecified() => Ok(format!("{ip}:{}", a.port())),
        Ok(SocketAddr::V4(a)) if a.ip().is_loopback() => Ok(value.to_string()),
        _ => Err(format!(
            "{METRICS_FLAG} {value}: the harness runs the operator on its pod IP {ip} and allows \
             only 0.0.0.0 or loopback (127.0.0.0/8) listen addresses"
        )),
    }
}

/// A kubeconfig for the pod's ServiceAccount: the API server and CA of `cluster` (the
/// podlet's own kubeconfig entry), authenticated by `token`.
pub fn kubeconfig(cluster: &Value, service_account: &str, token: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "in-cluster", "cluster": cluster}],
        "users": [{"name": service_account, "user": {"token": token}}],
        "contexts": [{"name": "in-cluster", "context": {"cluster": "in-cluster", "user": service_account}}],
        "current-context": "in-cluster",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const IP: Ipv4Addr = Ipv4Addr::new(127, 2, 4, 7);

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_operator_image_is_known_by_its_repository_name() {
        for yes in [
            "ghcr.io/marekvs/marekvs-operator:0.1.0",
            "marekvs-operator",
            "localhost:5000/marekvs-operator@sha256:0123",
            "registry.example:443/a/b/marekvs-operator:dev",
        ] {
            assert!(is_operator_image(yes), "{yes}");
        }
        for no in [
            "ghcr.io/yannick/marekvs:latest",
            "marekvs-operator-helper:1",
            "ghcr.io/marekvs-operator/other:1",
            "my-marekvs-operator:1",
        ] {
            assert!(!is_operator_image(no), "{no}");
        }
    }

    #[test]
    fn a_wildcard_listen_address_moves_to_the_pod_ip_in_either_flag_form() {
        let env = BTreeMap::new();
        let (args, e) = on_pod_ip(
            &strings(&["run", "--metrics-addr=0.0.0.0:8080", "--namespace=x"]),
            &env,
            IP,
        )
        .unwrap();
        assert_eq!(
            args,
            strings(&["run", "--metrics-addr=127.2.4.7:8080", "--namespace=x"])
        );
        assert!(!e.contains_key(METRICS_ENV));
        let (args, _) = on_pod_ip(
            &strings(&["run", "--metrics-addr", "0.0.0.0:9000"]),
            &env,
            IP,
        )
        .unwrap();
        assert_eq!(args, strings(&["run", "--metrics-addr", "127.2.4.7:9000"]));
    }

    #[test]
    fn without_a_flag_the_default_or_the_env_address_moves_to_the_pod_ip() {
        let (args, e) = on_pod_ip(&[], &BTreeMap::new(), IP).unwrap();
        assert_eq!(args, strings(&["run"]));
        assert_eq!(e[METRICS_ENV], "127.2.4.7:8080");
        let env = BTreeMap::from([(METRICS_ENV.to_string(), "0.0.0.0:7000".to_string())]);
        let (_, e) = on_pod_ip(&strings(&["run"]), &env, IP).unwrap();
        assert_eq!(e[METRICS_ENV], "127.2.4.7:7000");
    }

    #[test]
    fn a_loopback_address_is_kept_and_any_other_refused() {
        let env = BTreeMap::new();
        let (args, _) =
            on_pod_ip(&strings(&["run", "--metrics-addr=127.0.0.1:0"]), &env, IP).unwrap();
        assert_eq!(args[1], "--metrics-addr=127.0.0.1:0");
        let err =
            on_pod_ip(&strings(&["run", "--metrics-addr=10.0.0.1:8080"]), &env, IP).unwrap_err();
        assert!(err.contains("10.0.0.1:8080"), "{err}");
        let env = BTreeMap::from([(METRICS_ENV.to_string(), "[::]:8080".to_string())]);
        assert!(on_pod_ip(&strings(&["run"]), &env, IP).is_err());
    }

    #[test]
    fn the_kubeconfig_names_the_cluster_and_the_token() {
        let cluster =
            json!({"server": "https://127.0.0.1:26443", "certificate-authority": "/ca.crt"});
        let k = kubeconfig(&cluster, "marekvs-operator", "tok");
        assert_eq!(k["clusters"][0]["cluster"], cluster);
        assert_eq!(k["users"][0]["user"]["token"], "tok");
        assert_eq!(k["current-context"], "in-cluster");
        assert_eq!(k["contexts"][0]["context"]["user"], "marekvs-operator");
    }

    #[test]
    fn an_image_tag_may_pick_another_build() {
        assert_eq!(
            image_tag("ghcr.io/marekvs/marekvs-operator:0.1.0"),
            Some("0.1.0")
        );
        assert_eq!(image_tag("localhost:5000/marekvs-operator"), None);
        assert_eq!(
            image_tag("r:5000/m/marekvs-operator:old@sha256:ab"),
            Some("old")
        );
        let (tag, old) = parse_tag_binary("upgrade-from=/c/old").unwrap();
        assert!(parse_tag_binary("=/c/old").is_err() && parse_tag_binary("x").is_err());
        let by_tag = BTreeMap::from([(tag, old)]);
        let default = Path::new("/t/marekvs-operator");
        let pick = |image| binary_for(image, Some(default), &by_tag);
        assert_eq!(
            pick("m/marekvs-operator:upgrade-from"),
            Some(Path::new("/c/old"))
        );
        assert_eq!(pick("m/marekvs-operator:0.1.0"), Some(default));
        assert_eq!(pick("m/marekvs-operator"), Some(default));
        assert_eq!(binary_for("m/marekvs-operator:0.1.0", None, &by_tag), None);
    }
}
