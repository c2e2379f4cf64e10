//! Desired child objects of a MarekvsCluster, built as plain values (no I/O): the shared
//! vocabulary of labels and names (`names`), the Services, the PDB and each member's PVC and
//! Pod (`builders`), and their hashes (`hash`).

mod builders;
mod hash;
mod names;

pub use builders::*;
pub use hash::*;
pub use names::*;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::PodSpec;
    use kube::ResourceExt;
    use marekvs_api::{MarekvsCluster, REQUIREPASS};
    use serde_json::{Value, json};

    use crate::error::Error;
    use marekvs_api::MarekvsClusterSpec;

    fn cr() -> MarekvsCluster {
        let spec: MarekvsClusterSpec = serde_json::from_value(json!({
            "image": "marekvs:1", "replicationFactor": 2, "storage": {"size": "5Gi", "className": "fast"},
            "resources": {"cpu": "1", "memory": "1Gi"}, "extraEnv": {"RUST_LOG": "debug"},
            "nodeSelector": {"disk": "ssd"}
        }))
        .unwrap();
        let mut cr = MarekvsCluster::new("demo", spec);
        cr.metadata.namespace = Some("ns".into());
        cr.metadata.uid = Some("uid-1".into());
        cr
    }

    #[test]
    fn pod_has_statefulset_identity_and_the_node_contract() {
        let p = serde_json::to_value(pod(&cr(), 3, "cluster.local").unwrap()).unwrap();
        assert_eq!(p["metadata"]["name"], "demo-3");
        assert_eq!(p["spec"]["hostname"], "demo-3");
        assert_eq!(p["spec"]["subdomain"], "demo-headless");
        assert_eq!(p["spec"]["securityContext"]["fsGroup"], 65534);
        assert_eq!(
            p["spec"]["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        let sc = &p["spec"]["containers"][0]["securityContext"];
        assert_eq!(sc["readOnlyRootFilesystem"], true);
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["capabilities"]["drop"][0], "ALL");
        assert_eq!(
            p["metadata"]["ownerReferences"][0]["kind"],
            "MarekvsCluster"
        );
        assert_eq!(p["metadata"]["ownerReferences"][0]["controller"], true);
        let c = &p["spec"]["containers"][0];
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/ready");
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/alive");
        assert_eq!(c["lifecycle"]["preStop"]["httpGet"]["path"], "/drain");
        assert_eq!(c["resources"]["requests"]["cpu"], "1");
        assert!(
            c["resources"]["limits"].get("cpu").is_none(),
            "no CPU limit"
        );
        assert_eq!(c["resources"]["limits"]["memory"], "1Gi");
        let env: BTreeMap<String, String> = c["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().into(),
                    e["value"].as_str().unwrap().into(),
                )
            })
            .collect();
        assert_eq!(
            env["MAREKVS_SEEDS"],
            "demo-headless.ns.svc.cluster.local:7946"
        );
        assert_eq!(env["MAREKVS_REPLICAS_N"], "2");
        assert_eq!(env["MAREKVS_DATA_DIR"], "/data");
        assert_eq!(env["RUST_LOG"], "debug");
        assert!(
            !env.contains_key("MAREKVS_NODE_ID"),
            "the node id comes from the hostname ordinal"
        );
        assert_eq!(
            p["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
            "data-demo-3"
        );
        assert_eq!(p["spec"]["nodeSelector"]["disk"], "ssd");
    }

    /// `MAREKVS_REQUIREPASS` given in `env` from a Secret is the same password as
    /// `spec.auth`: the pod gets the same single variable and the operator reads the same key.
    #[test]
    fn a_password_in_env_is_the_same_as_spec_auth() {
        let via_auth = json!({"image": "x", "extraEnv": {"RUST_LOG": "info"},
            "auth": {"passwordSecretRef": {"name": "kv-auth", "key": "password"}}});
        let via_env = json!({"image": "x", "extraEnv": {"RUST_LOG": "info"},
            "env": [{"name": "MAREKVS_REQUIREPASS",
                     "valueFrom": {"secretKeyRef": {"name": "kv-auth", "key": "password"}}}]});
        let a: MarekvsClusterSpec = serde_json::from_value(via_auth.clone()).unwrap();
        let e: MarekvsClusterSpec = serde_json::from_value(via_env.clone()).unwrap();
        assert_eq!(a.password_secret_ref(), e.password_secret_ref());
        assert_eq!(
            e.password_secret_ref().map(|r| (r.name, r.key)),
            Some(("kv-auth".into(), "password".into()))
        );
        let (pa, pe) = (spec_of(via_auth), spec_of(via_env));
        assert_eq!(pa.containers[0].env, pe.containers[0].env);
        let named = |p: &PodSpec| {
            p.containers[0]
                .env
                .iter()
                .flatten()
                .filter(|v| v.name == REQUIREPASS)
                .count()
        };
        assert_eq!(named(&pe), 1, "the pod gets it once");
        // Same pod, same hash: moving the password from spec.auth to env restarts nothing.
        let mut c = cr();
        c.spec.auth = a.auth.clone();
        let h = desired_template_hash(&c, 0, "cluster.local").unwrap();
        c.spec.auth = None;
        c.spec.env = e.env.clone();
        assert_eq!(h, desired_template_hash(&c, 0, "cluster.local").unwrap());
        // Without either, no password.
        let none: MarekvsClusterSpec = serde_json::from_value(json!({"image": "x",
            "env": [{"name": "OTHER", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}))
        .unwrap();
        assert_eq!(none.password_secret_ref(), None);
    }

    #[test]
    fn env_from_secrets_and_config_maps_follows_extra_env() {
        let p = spec_of(
            json!({"image": "x", "extraEnv": {"RUST_LOG": "info"}, "env": [
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "t"}}},
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "mode"}}},
            {"name": "PLAIN", "value": "1"}]}),
        );
        let names: Vec<&str> = p.containers[0]
            .env
            .iter()
            .flatten()
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(
            names,
            [
                "MAREKVS_SEEDS",
                "MAREKVS_REPLICAS_N",
                "MAREKVS_ADVERTISE_IP",
                "MAREKVS_DATA_DIR",
                "MAREKVS_CLUSTER",
                "RUST_LOG",
                "TOKEN",
                "MODE",
                "PLAIN"
            ]
        );
        let v = serde_json::to_value(&p.containers[0].env).unwrap();
        assert_eq!(v[7]["valueFrom"]["configMapKeyRef"]["name"], "cm");
        assert_eq!(v[6]["valueFrom"]["secretKeyRef"]["key"], "t");
    }

    #[test]
    fn pod_template_options_reach_the_pod() {
        let mut c = cr();
        c.spec = serde_json::from_value(json!({"image": "x",
            "imagePullSecrets": [{"name": "regcred"}, {"name": "other"}],
            "priorityClassName": "kv-critical", "serviceAccountName": "kv",
            "podLabels": {"team": "a", "app.kubernetes.io/instance": "sneaky"},
            "podAnnotations": {"prometheus.io/scrape": "true"}}))
        .unwrap();
        let p = pod(&c, 2, "cluster.local").unwrap();
        let spec = p.spec.as_ref().unwrap();
        let pulls: Vec<&str> = spec
            .image_pull_secrets
            .iter()
            .flatten()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(pulls, ["regcred", "other"]);
        assert_eq!(spec.priority_class_name.as_deref(), Some("kv-critical"));
        assert_eq!(spec.service_account_name.as_deref(), Some("kv"));
        assert_eq!(spec.automount_service_account_token, Some(false));
        let labels = p.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["team"], "a");
        // The operator's own labels win (the schema refuses them anyway).
        assert_eq!(labels[LABEL_INSTANCE], "demo");
        assert_eq!(labels[LABEL_ORDINAL], "2");
        let annotations = p.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations["prometheus.io/scrape"], "true");
        assert_eq!(
            annotations[ANNOTATION_TEMPLATE_HASH],
            desired_template_hash(&c, 2, "cluster.local").unwrap()
        );
        // Unset: none of them is in the pod.
        let plain = serde_json::to_value(spec_of(json!({"image": "x"}))).unwrap();
        for field in [
            "imagePullSecrets",
            "priorityClassName",
            "serviceAccountName",
        ] {
            assert!(plain.get(field).is_none(), "{field}: {plain}");
        }
    }

    /// Every pod-level option rolls the members (it changes the hash); the client Service's
    /// options do not. Without labels and annotations the hash is the pod spec's alone, as it
    /// was before they existed.
    #[test]
    fn pod_template_options_are_in_the_hash_and_service_options_are_not() {
        let base = cr();
        let h = desired_template_hash(&base, 1, "cluster.local").unwrap();
        assert_eq!(
            h,
            template_hash(&serde_json::to_value(pod_spec(&base, 1, "cluster.local")).unwrap())
        );
        let changes: Vec<(&str, Value)> = vec![
            ("podLabels", json!({"team": "a"})),
            ("podAnnotations", json!({"a.example/x": "1"})),
            ("priorityClassName", json!("high")),
            ("serviceAccountName", json!("kv")),
            ("imagePullSecrets", json!([{"name": "regcred"}])),
            (
                "env",
                json!([{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]),
            ),
        ];
        let mut seen = std::collections::BTreeSet::from([h.clone()]);
        for (field, value) in changes {
            let mut spec = serde_json::to_value(&base.spec).unwrap();
            spec[field] = value;
            let mut c = base.clone();
            c.spec = serde_json::from_value(spec).unwrap();
            let changed = desired_template_hash(&c, 1, "cluster.local").unwrap();
            assert!(seen.insert(changed), "{field} must change the hash");
        }
        // A different annotation value is a different hash too.
        let mut a = base.clone();
        a.spec
            .pod_annotations
            .insert("a.example/x".into(), "2".into());
        assert!(seen.insert(desired_template_hash(&a, 1, "cluster.local").unwrap()));
        let mut svc = base.clone();
        svc.spec.client_service = Some(
            serde_json::from_value(json!({"type": "LoadBalancer",
                "annotations": {"lb.example/internal": "true"},
                "loadBalancerSourceRanges": ["10.0.0.0/8"], "trafficDistribution": "PreferSameZone"}))
            .unwrap(),
        );
        assert_eq!(h, desired_template_hash(&svc, 1, "cluster.local").unwrap());
    }

    #[test]
    fn the_client_service_takes_its_options_and_prefers_close_members() {
        let v = serde_json::to_value(client_service(&cr()).unwrap()).unwrap();
        assert_eq!(v["spec"]["type"], "ClusterIP");
        assert_eq!(v["spec"]["trafficDistribution"], "PreferClose");
        assert!(v["spec"].get("loadBalancerSourceRanges").is_none());
        assert!(v["metadata"].get("annotations").is_none());
        let mut c = cr();
        c.spec.client_service = Some(
            serde_json::from_value(json!({"type": "LoadBalancer",
                "annotations": {"lb.example/internal": "true"},
                "loadBalancerSourceRanges": ["10.0.0.0/8"], "trafficDistribution": "PreferSameZone"}))
            .unwrap(),
        );
        let svc = client_service(&c).unwrap();
        let v = serde_json::to_value(&svc).unwrap();
        assert_eq!(v["spec"]["type"], "LoadBalancer");
        assert_eq!(v["spec"]["trafficDistribution"], "PreferSameZone");
        assert_eq!(v["spec"]["loadBalancerSourceRanges"], json!(["10.0.0.0/8"]));
        // What is applied keeps the user's annotations beside the applied hash.
        let (sent, hash) = applied(&svc).unwrap();
        assert_eq!(
            sent["metadata"]["annotations"],
            json!({"lb.example/internal": "true", ANNOTATION_APPLIED_HASH: hash})
        );
        assert_ne!(hash, applied(&client_service(&cr()).unwrap()).unwrap().1);
    }

    /// Only the client Service selects the client-traffic label; a new pod carries "on",
    /// and the label is no input of the template hash (existing members do not roll).
    #[test]
    fn only_the_client_service_selects_members_taking_client_traffic() {
        let c = cr();
        let every_member = json!({LABEL_NAME: "marekvs", LABEL_INSTANCE: "demo"});
        let client = serde_json::to_value(client_service(&c).unwrap()).unwrap();
        assert_eq!(
            client["spec"]["selector"],
            json!({LABEL_NAME: "marekvs", LABEL_INSTANCE: "demo", LABEL_CLIENT_TRAFFIC: "on"})
        );
        let headless = serde_json::to_value(headless_service(&c).unwrap()).unwrap();
        assert_eq!(headless["spec"]["selector"], every_member);
        let pdb = serde_json::to_value(pdb(&c).unwrap()).unwrap();
        assert_eq!(pdb["spec"]["selector"]["matchLabels"], every_member);
        assert_eq!(
            selector_string(&c),
            "app.kubernetes.io/instance=demo,app.kubernetes.io/name=marekvs"
        );
        let p = pod(&c, 2, "cluster.local").unwrap();
        for spread in p
            .spec
            .as_ref()
            .unwrap()
            .topology_spread_constraints
            .iter()
            .flatten()
        {
            let selector = spread.label_selector.as_ref().unwrap().match_labels.clone();
            assert_eq!(selector, Some(selector_labels(&c)));
        }
        assert_eq!(p.labels()[LABEL_CLIENT_TRAFFIC], "on");
        let spec_only = template_hash(&pod_spec_value(p.spec.as_ref().unwrap()).unwrap());
        assert_eq!(p.annotations()[ANNOTATION_TEMPLATE_HASH], spec_only);
        // While a whole-cluster upgrade is recorded, every new pod starts with its traffic
        // off (the views are checked first); its template hash is the same.
        let mut upgrading = c.clone();
        upgrading.status = Some(marekvs_api::MarekvsClusterStatus {
            upgrade: Some(marekvs_api::UpgradeStatus {
                step: marekvs_api::UpgradeStep::Starting,
                started_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
                step_started_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
                stopped_at: None,
            }),
            ..Default::default()
        });
        let q = pod(&upgrading, 2, "cluster.local").unwrap();
        assert_eq!(q.labels()[LABEL_CLIENT_TRAFFIC], "off");
        assert_eq!(
            q.annotations()[ANNOTATION_TEMPLATE_HASH],
            p.annotations()[ANNOTATION_TEMPLATE_HASH]
        );
    }

    #[test]
    fn the_password_comes_from_the_secret_never_in_plain_env() {
        let plain = spec_of(json!({"image": "x"}));
        let env = |p: &PodSpec| p.containers[0].env.clone().unwrap_or_default();
        assert!(env(&plain).iter().all(|e| e.name != "MAREKVS_REQUIREPASS"));
        let with = spec_of(json!({"image": "x",
            "auth": {"passwordSecretRef": {"name": "kv-auth", "key": "password"}}}));
        let e = env(&with)
            .into_iter()
            .find(|e| e.name == "MAREKVS_REQUIREPASS")
            .expect("set");
        assert_eq!(e.value, None);
        let r = e.value_from.unwrap().secret_key_ref.unwrap();
        assert_eq!((r.name.as_str(), r.key.as_str()), ("kv-auth", "password"));
        assert_eq!(r.optional, Some(false));
    }

    fn spec_of(spec: Value) -> PodSpec {
        let mut cr = MarekvsCluster::new("demo", serde_json::from_value(spec).unwrap());
        cr.metadata.namespace = Some("ns".into());
        pod_spec(&cr, 0, "cluster.local")
    }

    #[test]
    fn members_gossip_under_their_clusters_own_name_unless_it_ran_with_the_default() {
        use marekvs_api::MarekvsClusterStatus;
        let gossip = |status: Option<MarekvsClusterStatus>, spec: Value| {
            let mut cr = MarekvsCluster::new("demo", serde_json::from_value(spec).unwrap());
            cr.metadata.namespace = Some("ns".into());
            cr.status = status;
            let env = pod_spec(&cr, 0, "cluster.local").containers[0]
                .env
                .clone()
                .unwrap_or_default();
            env.iter()
                .filter(|e| e.name == "MAREKVS_CLUSTER")
                .map(|e| e.value.clone().unwrap_or_default())
                .collect::<Vec<_>>()
        };
        let image = json!({"image": "x"});
        let recorded = |name: &str| MarekvsClusterStatus {
            gossip_cluster: Some(name.into()),
            instance_names: vec!["demo-0".into()],
            ..Default::default()
        };
        // New (nothing recorded yet, no members): its own name, as the first pass records.
        assert_eq!(gossip(None, image.clone()), ["ns/demo"]);
        assert_eq!(
            gossip(Some(recorded("ns/demo")), image.clone()),
            ["ns/demo"]
        );
        // Ran with the server's default (recorded so, or members from before it was
        // recorded): no variable, so its pods are unchanged.
        assert!(gossip(Some(recorded("marekvs")), image.clone()).is_empty());
        let legacy = MarekvsClusterStatus {
            instance_names: vec!["demo-0".into()],
            ..Default::default()
        };
        assert!(gossip(Some(legacy), image).is_empty());
        // The user's own name wins, once.
        let own = json!({"image": "x", "extraEnv": {"MAREKVS_CLUSTER": "prod-kv"}});
        assert_eq!(gossip(Some(recorded("ns/demo")), own), ["prod-kv"]);
    }

    fn resources_of(spec: &PodSpec) -> Value {
        serde_json::to_value(&spec.containers[0].resources).unwrap()
    }

    #[test]
    fn unset_resources_take_marekvs_own_operators_defaults_and_explicit_values_win() {
        let want =
            json!({"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "1Gi"}});
        for unset in [
            json!({"image": "marekvs:1"}),
            json!({"image": "marekvs:1", "resources": {}}),
        ] {
            assert_eq!(resources_of(&spec_of(unset)), want);
        }
        // One field set: it wins, the other keeps its default.
        assert_eq!(
            resources_of(&spec_of(
                json!({"image": "marekvs:1", "resources": {"cpu": "2"}})
            )),
            json!({"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"memory": "1Gi"}})
        );
        assert_eq!(
            resources_of(&spec_of(
                json!({"image": "marekvs:1", "resources": {"memory": "4Gi"}})
            )),
            json!({"requests": {"cpu": "500m", "memory": "4Gi"}, "limits": {"memory": "4Gi"}})
        );
        // Both set: exactly them, still no CPU limit.
        assert_eq!(
            resources_of(&spec_of(
                json!({"image": "marekvs:1", "resources": {"cpu": "250m", "memory": "512Mi"}})
            )),
            json!({"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "512Mi"}})
        );
    }

    fn spread_of(spec: &PodSpec) -> Value {
        serde_json::to_value(&spec.topology_spread_constraints).unwrap()
    }

    fn default_spread(hostname: &str) -> Value {
        let selector = json!({"matchLabels": {
            "app.kubernetes.io/instance": "demo", "app.kubernetes.io/name": "marekvs"}});
        json!([
            {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
             "whenUnsatisfiable": hostname, "labelSelector": selector},
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
             "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector},
        ])
    }

    #[test]
    fn members_spread_softly_over_hosts_and_zones_by_default() {
        let s = spec_of(json!({"image": "marekvs:1"}));
        assert_eq!(spread_of(&s), default_spread("ScheduleAnyway"));
        // The selector is the one of the Services and the PDB: it counts this cluster's members.
        let c = MarekvsCluster::new(
            "demo",
            serde_json::from_value(json!({"image": "m"})).unwrap(),
        );
        assert_eq!(
            s.topology_spread_constraints.unwrap()[0]
                .label_selector
                .as_ref()
                .unwrap()
                .match_labels,
            Some(selector_labels(&c))
        );
        assert_eq!(
            spread_of(&spec_of(json!(
                {"image": "marekvs:1", "hostnameSpreadWhenUnsatisfiable": "ScheduleAnyway"}
            ))),
            default_spread("ScheduleAnyway")
        );
    }

    #[test]
    fn do_not_schedule_makes_the_hostname_spread_hard_and_only_it() {
        assert_eq!(
            spread_of(&spec_of(json!(
                {"image": "marekvs:1", "hostnameSpreadWhenUnsatisfiable": "DoNotSchedule"}
            ))),
            default_spread("DoNotSchedule")
        );
    }

    #[test]
    fn explicit_topology_spread_constraints_replace_the_defaults() {
        let theirs = json!([{"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule",
                             "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "demo"}}}]);
        for hostname in ["ScheduleAnyway", "DoNotSchedule"] {
            let s = spec_of(
                json!({"image": "marekvs:1", "topologySpreadConstraints": theirs,
                                   "hostnameSpreadWhenUnsatisfiable": hostname}),
            );
            assert_eq!(spread_of(&s), theirs, "theirs, whatever {hostname}");
        }
        // An explicit empty list is no spread at all.
        assert_eq!(
            spread_of(&spec_of(
                json!({"image": "marekvs:1", "topologySpreadConstraints": []})
            )),
            json!([])
        );
    }

    #[test]
    fn members_get_no_service_account_token() {
        assert_eq!(
            spec_of(json!({"image": "marekvs:1"})).automount_service_account_token,
            Some(false)
        );
    }

    #[test]
    fn the_template_hash_follows_the_pod_spec_only() {
        let base = cr();
        let h = desired_template_hash(&base, 1, "cluster.local").unwrap();
        assert_eq!(h.len(), 16);
        assert_eq!(
            h,
            desired_template_hash(&base, 1, "cluster.local").unwrap(),
            "stable"
        );
        let mut changed = base.clone();
        changed.spec.image = "marekvs:2".into();
        assert_ne!(
            h,
            desired_template_hash(&changed, 1, "cluster.local").unwrap()
        );
        let mut changed = base.clone();
        changed
            .spec
            .extra_env
            .insert("RUST_LOG".into(), "info".into());
        assert_ne!(
            h,
            desired_template_hash(&changed, 1, "cluster.local").unwrap()
        );
        // Fields that do not reach the pod do not restart anything.
        let mut same = base.clone();
        same.spec.nodes = 7;
        same.spec.paused = true;
        same.spec.storage.size = "50Gi".into();
        assert_eq!(h, desired_template_hash(&same, 1, "cluster.local").unwrap());
        // The hard hostname spread reaches the pod: members are rolled onto it.
        let mut changed = base.clone();
        changed.spec.hostname_spread_when_unsatisfiable =
            Some(marekvs_api::WhenUnsatisfiable::DoNotSchedule);
        assert_ne!(
            h,
            desired_template_hash(&changed, 1, "cluster.local").unwrap()
        );
    }

    #[test]
    fn pvc_outlives_the_cluster_object() {
        let v = serde_json::to_value(pvc(&cr(), 0, 1).unwrap()).unwrap();
        assert_eq!(v["metadata"]["name"], "data-demo-0");
        // Stamped with the uid of the object it was made for: how the operator knows its own.
        assert_eq!(
            v["metadata"]["annotations"][ANNOTATION_CLUSTER_UID],
            cr().metadata.uid.unwrap()
        );
        assert!(v["metadata"].get("ownerReferences").is_none());
        assert_eq!(v["spec"]["storageClassName"], "fast");
        assert_eq!(v["spec"]["resources"]["requests"]["storage"], "5Gi");
    }

    #[test]
    fn services_and_pdb() {
        let h = serde_json::to_value(headless_service(&cr()).unwrap()).unwrap();
        assert_eq!(h["spec"]["clusterIP"], "None");
        assert_eq!(h["spec"]["publishNotReadyAddresses"], true);
        let p = serde_json::to_value(pdb(&cr()).unwrap()).unwrap();
        // No eviction of a member, but of the one pod labelled allowed (handed off, and being
        // moved off a node being drained).
        assert_eq!(p["spec"]["maxUnavailable"], 0);
        assert_eq!(p["spec"].get("minAvailable"), None);
        assert_eq!(
            p["spec"]["selector"]["matchExpressions"],
            serde_json::json!([{"key": "marekvs.io/eviction", "operator": "NotIn", "values": ["allowed"]}])
        );
    }

    #[test]
    fn a_cluster_without_uid_is_an_error_not_a_panic() {
        let mut c = cr();
        c.metadata.uid = None;
        assert!(matches!(headless_service(&c), Err(Error::NoUid(n)) if n == "demo"));
        assert!(matches!(client_service(&c), Err(Error::NoUid(_))));
        assert!(matches!(pdb(&c), Err(Error::NoUid(_))));
        assert!(matches!(pod(&c, 0, "cluster.local"), Err(Error::NoUid(_))));
        // The hash needs no owner; a PVC has none, but is stamped with the uid.
        assert!(desired_template_hash(&c, 0, "cluster.local").is_ok());
        assert!(matches!(pvc(&c, 0, 0), Err(Error::NoUid(_))));
    }

    #[test]
    fn ordinals_parse_strictly() {
        assert_eq!(ordinal_from_name("demo", "", "demo-3"), Some(3));
        assert_eq!(ordinal_from_name("demo", "data-", "data-demo-12"), Some(12));
        assert_eq!(ordinal_from_name("demo", "", "demo-03"), None);
        assert_eq!(ordinal_from_name("demo", "", "demo-x"), None);
        assert_eq!(ordinal_from_name("demo", "", "demo2-1"), None);
        assert_eq!(ordinal_from_name("demo", "", "demo-"), None);
    }
}
