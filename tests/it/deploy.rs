//! Deployment files: Kubernetes manifests validate against a pinned schema (kubernetes-validate)
//! after kustomize rendering, the agent's DaemonSet carries the security settings, the
//! generated PrometheusRule and dashboards ConfigMap equal `alerts/` and `dashboards/`
//! (`UPDATE_DEPLOY=1` regenerates them), and `systemd-analyze verify` accepts the unit.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::project_root;
use serde_yaml::{Mapping, Value};

const KUBERNETES_VERSION: &str = "1.31.0";

pub(crate) fn kube_dir() -> PathBuf {
    project_root().join("deploy/kubernetes")
}

pub(crate) fn read_yaml_documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .filter(|v| !v.is_null())
        .collect()
}

use serde::Deserialize;

fn map(pairs: Vec<(&str, Value)>) -> Value {
    let mut m = Mapping::new();
    for (k, v) in pairs {
        m.insert(Value::String(k.into()), v);
    }
    Value::Mapping(m)
}

fn labels(component: &str, extra: &[(&str, &str)]) -> Value {
    let mut pairs = vec![
        (
            "app.kubernetes.io/name",
            Value::String("rdma-fabric-exporter".into()),
        ),
        (
            "app.kubernetes.io/component",
            Value::String(component.into()),
        ),
    ];
    pairs.extend(
        extra
            .iter()
            .map(|(k, v)| (*k, Value::String(v.to_string()))),
    );
    map(pairs)
}

/// The PrometheusRule: the groups of `alerts/rdma-rules.yml` then `alerts/rdma-alerts.yml`.
pub(crate) fn prometheus_rule() -> Value {
    let mut groups = Vec::new();
    for file in ["alerts/rdma-rules.yml", "alerts/rdma-alerts.yml"] {
        let doc = &read_yaml_documents(&project_root().join(file))[0];
        groups.extend(doc["groups"].as_sequence().unwrap().iter().cloned());
    }
    map(vec![
        (
            "apiVersion",
            Value::String("monitoring.coreos.com/v1".into()),
        ),
        ("kind", Value::String("PrometheusRule".into())),
        (
            "metadata",
            map(vec![
                ("name", Value::String("rdma-fabric-exporter".into())),
                ("labels", labels("rules", &[("role", "alert-rules")])),
            ]),
        ),
        ("spec", map(vec![("groups", Value::Sequence(groups))])),
    ])
}

/// One ConfigMap with every dashboard, labelled for the Grafana sidecar.
pub(crate) fn dashboards_config_map() -> Value {
    let mut files: Vec<PathBuf> = std::fs::read_dir(project_root().join("dashboards"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let data = files
        .iter()
        .map(|p| {
            (
                p.file_name().unwrap().to_str().unwrap().to_string(),
                Value::String(std::fs::read_to_string(p).unwrap()),
            )
        })
        .collect::<Vec<_>>();
    let mut data_map = Mapping::new();
    for (k, v) in data {
        data_map.insert(Value::String(k), v);
    }
    map(vec![
        ("apiVersion", Value::String("v1".into())),
        ("kind", Value::String("ConfigMap".into())),
        (
            "metadata",
            map(vec![
                (
                    "name",
                    Value::String("rdma-fabric-exporter-dashboards".into()),
                ),
                (
                    "labels",
                    labels("dashboards", &[("grafana_dashboard", "1")]),
                ),
            ]),
        ),
        ("data", Value::Mapping(data_map)),
    ])
}

fn generated(file: &str, value: &Value) {
    let path = kube_dir().join(file);
    let text = format!(
        "# Generated from alerts/ and dashboards/ by tests/it/deploy.rs (UPDATE_DEPLOY=1 cargo test --test it deploy::).\n# Do not edit by hand.\n{}",
        serde_yaml::to_string(value).unwrap()
    );
    if std::env::var_os("UPDATE_DEPLOY").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == text,
        "{} is out of date with alerts/ or dashboards/: run UPDATE_DEPLOY=1 cargo test --test it deploy::",
        path.display()
    );
}

#[test]
fn generated_objects_equal_alerts_and_dashboards() {
    generated("prometheusrule.yaml", &prometheus_rule());
    generated("grafana-dashboards.yaml", &dashboards_config_map());
    // And the other way round: the rule groups on disk are exactly the shipped ones.
    let on_disk = &read_yaml_documents(&kube_dir().join("prometheusrule.yaml"))[0];
    assert_eq!(on_disk["spec"], prometheus_rule()["spec"]);
}

/// `kubectl kustomize`, where kubectl exists.
fn render_with_kubectl(kustomization_dir: &Path) -> Option<Vec<Value>> {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(kustomization_dir)
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let text = String::from_utf8(out.stdout).unwrap();
    Some(
        serde_yaml::Deserializer::from_str(&text)
            .map(|d| Value::deserialize(d).unwrap())
            .filter(|v| !v.is_null())
            .collect(),
    )
}

/// What kustomize does with these kustomizations (resources, and the namespace set on every
/// namespaced object), for machines without kubectl.
pub(crate) fn render(kustomization_dir: &Path) -> Vec<Value> {
    let kustomization = &read_yaml_documents(&kustomization_dir.join("kustomization.yaml"))[0];
    let namespace = kustomization["namespace"].as_str().map(str::to_string);
    let mut objects = Vec::new();
    for resource in kustomization["resources"].as_sequence().unwrap() {
        for mut object in read_yaml_documents(&kustomization_dir.join(resource.as_str().unwrap())) {
            if let (Some(ns), false) = (&namespace, object["kind"] == "Namespace") {
                object["metadata"]
                    .as_mapping_mut()
                    .unwrap()
                    .insert("namespace".into(), Value::String(ns.clone()));
            }
            objects.push(object);
        }
    }
    objects
}

fn identities(objects: &[Value]) -> Vec<String> {
    let mut ids: Vec<String> = objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}/{}",
                o["kind"].as_str().unwrap_or_default(),
                o["metadata"]["namespace"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect();
    ids.sort();
    ids
}

fn kubernetes_validate() -> String {
    std::env::var("KUBERNETES_VALIDATE")
        .unwrap_or_else(|_| "/opt/kubernetes-validate/bin/kubernetes-validate".into())
}

/// Validates every core object with kubernetes-validate (strict), and the prometheus-operator
/// objects (not in its schema set) by their required fields.
pub(crate) fn validate(objects: &[Value], dir: &Path) {
    let mut core = String::new();
    for object in objects {
        let kind = object["kind"].as_str().unwrap();
        match object["apiVersion"].as_str().unwrap() {
            "monitoring.coreos.com/v1" => check_operator_object(kind, object),
            _ => {
                core.push_str("---\n");
                core.push_str(&serde_yaml::to_string(object).unwrap());
            }
        }
    }
    let file = dir.join("rendered.yaml");
    std::fs::write(&file, core).unwrap();
    let out = Command::new(kubernetes_validate())
        .args(["--strict", "-k", KUBERNETES_VERSION])
        .arg(&file)
        .output()
        .expect("kubernetes-validate (scripts/test installs it into /opt/kubernetes-validate)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("ERROR"), "{text}");
}

fn check_operator_object(kind: &str, object: &Value) {
    let spec = &object["spec"];
    assert!(
        object["metadata"]["name"].is_string(),
        "{kind} without a name"
    );
    match kind {
        "ServiceMonitor" => {
            assert!(spec["selector"]["matchLabels"].is_mapping());
            for endpoint in spec["endpoints"].as_sequence().unwrap() {
                assert_eq!(endpoint["port"], "metrics");
            }
        }
        "PodMonitor" => {
            assert!(spec["selector"]["matchLabels"].is_mapping());
            for endpoint in spec["podMetricsEndpoints"].as_sequence().unwrap() {
                assert_eq!(endpoint["port"], "metrics");
            }
        }
        "Probe" => {
            assert_eq!(spec["prober"]["path"], "/probe");
            assert!(spec["prober"]["url"].as_str().unwrap().ends_with(":9866"));
            assert!(!spec["targets"]["staticConfig"]["static"]
                .as_sequence()
                .unwrap()
                .is_empty());
        }
        "PrometheusRule" => assert!(!spec["groups"].as_sequence().unwrap().is_empty()),
        other => panic!("unexpected prometheus-operator kind {other}"),
    }
}

#[test]
fn manifests_render_and_validate_against_a_pinned_schema() {
    let dir = tempfile::tempdir().unwrap();
    for kustomization in [
        kube_dir(),
        kube_dir().join("overlays/without-operator"),
        kube_dir().join("overlays/node-agent-only"),
        kube_dir().join("overlays/pod-attribution"),
        kube_dir().join("overlays/sharded-switch-poller"),
    ] {
        let objects = render(&kustomization);
        assert!(
            objects.len() >= 5,
            "{}: {} objects",
            kustomization.display(),
            objects.len()
        );
        validate(&objects, dir.path());
        if let Some(by_kubectl) = render_with_kubectl(&kustomization) {
            assert_eq!(identities(&by_kubectl), identities(&objects));
            validate(&by_kubectl, dir.path());
        }
    }
}

#[test]
fn the_node_agent_runs_unprivileged_with_read_only_sys() {
    let objects = render(&kube_dir());
    let daemonset = objects
        .iter()
        .find(|o| o["kind"] == "DaemonSet")
        .expect("a DaemonSet");
    let pod = &daemonset["spec"]["template"]["spec"];
    assert_eq!(
        pod["hostNetwork"], true,
        "netdevs live in the host network namespace"
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_ne!(pod["securityContext"]["runAsUser"], 0);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert!(pod["tolerations"]
        .as_sequence()
        .is_some_and(|t| !t.is_empty()));
    assert!(pod["affinity"]["nodeAffinity"].is_mapping());
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["privileged"], false);
    assert_eq!(security["capabilities"]["drop"][0], "ALL");
    assert!(security["capabilities"]["add"].is_null());
    assert!(
        container["resources"]["requests"].is_mapping()
            && container["resources"]["limits"].is_mapping()
    );
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/healthz");
    let sys_mount = container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "sys")
        .unwrap();
    assert_eq!(sys_mount["readOnly"], true);
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args
        .contains(&format!("--path.sysfs={}", sys_mount["mountPath"].as_str().unwrap()).as_str()));
    // No volume other than /sys from the host.
    for volume in pod["volumes"].as_sequence().unwrap() {
        if !volume["hostPath"].is_null() {
            assert_eq!(volume["hostPath"]["path"], "/sys");
        }
    }
    let service = objects
        .iter()
        .find(|o| o["kind"] == "Service" && o["metadata"]["name"] == "rdma-node-agent")
        .unwrap();
    assert_eq!(service["spec"]["clusterIP"], "None", "headless");
    // The switch poller needs no host access at all.
    let poller = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let pod = &poller["spec"]["template"]["spec"];
    assert!(pod["hostNetwork"].is_null() || pod["hostNetwork"] == false);
    assert!(pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .all(|v| v["hostPath"].is_null()));
}

/// The DaemonSet of a kustomization.
fn daemonset(kustomization_dir: &Path) -> Value {
    render(kustomization_dir)
        .into_iter()
        .find(|o| o["kind"] == "DaemonSet")
        .expect("a DaemonSet")
}

/// The pod-attribution overlay's DaemonSet is a copy of the base one (the test renderer has no
/// patches): it must differ only by what its header grants, so the two cannot drift apart.
#[test]
fn the_pod_attribution_overlay_grants_only_what_it_says() {
    let base = daemonset(&kube_dir());
    let mut pods = daemonset(&kube_dir().join("overlays/pod-attribution"));
    let pod = &mut pods["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"], true);
    let pod = pod.as_mapping_mut().unwrap();
    pod.remove("hostPID");
    let security = pod.get_mut("securityContext").unwrap();
    assert_eq!(security["runAsUser"], 0);
    security["runAsNonRoot"] = true.into();
    security["runAsUser"] = 65534.into();
    security["runAsGroup"] = 65534.into();
    let container = &mut pod.get_mut("containers").unwrap()[0];
    let security = &container["securityContext"];
    assert_eq!(security["capabilities"]["drop"][0], "ALL");
    assert!(security["capabilities"]["add"].is_null());
    let args = container["args"].as_sequence_mut().unwrap();
    let added: Vec<Value> = args.drain(args.len() - 3..).collect();
    assert_eq!(
        added,
        [
            "--collector.pods",
            "--collector.pods.pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock",
            "--collector.pods.pod-logs-dir=/var/log/pods",
        ]
        .map(Value::from)
    );
    let mounts = container["volumeMounts"].as_sequence_mut().unwrap();
    for mount in mounts.drain(1..) {
        assert_eq!(mount["readOnly"], true, "{mount:?}");
    }
    let volumes = pod.get_mut("volumes").unwrap().as_sequence_mut().unwrap();
    let host_paths: Vec<Value> = volumes
        .drain(1..)
        .map(|v| v["hostPath"]["path"].clone())
        .collect();
    assert_eq!(
        host_paths,
        ["/var/lib/kubelet/pod-resources", "/var/log/pods"].map(Value::from)
    );
    assert_eq!(pods, base);
}

/// The sharded poller overlay: one Probe per replica, each keeping the hashmod bucket of its
/// replica's `--switch.shard`, the same switches in every Probe and in the poller's config.
#[test]
fn the_sharded_poller_overlay_covers_every_switch_once() {
    let objects = render(&kube_dir().join("overlays/sharded-switch-poller"));
    let statefulset = objects
        .iter()
        .find(|o| o["kind"] == "StatefulSet")
        .expect("a StatefulSet");
    assert!(
        !objects
            .iter()
            .any(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "rdma-switch-poller"),
        "the single poller is replaced"
    );
    let replicas = statefulset["spec"]["replicas"].as_u64().unwrap();
    let service = statefulset["spec"]["serviceName"].as_str().unwrap();
    let args: Vec<&str> = statefulset["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        args.contains(&format!("--switch.shard=$(SHARD_INDEX)/{replicas}").as_str()),
        "{args:?}"
    );
    // The headless Service is not picked up by the poller's ServiceMonitor (no double scrape).
    let monitor = objects
        .iter()
        .find(|o| o["kind"] == "ServiceMonitor" && o["metadata"]["name"] == "rdma-switch-poller")
        .unwrap();
    let headless = objects
        .iter()
        .find(|o| o["kind"] == "Service" && o["metadata"]["name"] == service)
        .unwrap();
    assert_eq!(headless["spec"]["clusterIP"], "None");
    let selected = |labels: &Value| {
        monitor["spec"]["selector"]["matchLabels"]
            .as_mapping()
            .unwrap()
            .iter()
            .all(|(k, v)| labels[k.as_str().unwrap()] == *v)
    };
    assert!(!selected(&headless["metadata"]["labels"]));

    let secret = objects.iter().find(|o| o["kind"] == "Secret").unwrap();
    let config: Value =
        serde_yaml::from_str(secret["stringData"]["config.yml"].as_str().unwrap()).unwrap();
    assert_eq!(config["switch_polling"], "on_demand");
    let configured: Vec<Value> = config["switches"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|s| s["name"].clone())
        .collect();
    let probes: Vec<&Value> = objects.iter().filter(|o| o["kind"] == "Probe").collect();
    assert_eq!(probes.len() as u64, replicas);
    let mut buckets = Vec::new();
    for probe in probes {
        let spec = &probe["spec"];
        assert_eq!(
            spec["jobName"], "rdma-switches",
            "one job label for every shard"
        );
        let statics = &spec["targets"]["staticConfig"];
        assert_eq!(statics["static"].as_sequence().unwrap(), &configured);
        let rules = statics["relabelingConfigs"].as_sequence().unwrap();
        assert_eq!(rules[0]["action"], "hashmod");
        assert_eq!(rules[0]["sourceLabels"][0], "__param_target");
        assert_eq!(rules[0]["modulus"].as_u64(), Some(replicas));
        assert_eq!(rules[1]["action"], "keep");
        let bucket: u64 = rules[1]["regex"].as_str().unwrap().parse().unwrap();
        assert_eq!(
            spec["prober"]["url"],
            format!("rdma-switch-poller-{bucket}.{service}.rdma-monitoring.svc:9866").as_str()
        );
        buckets.push(bucket);
    }
    buckets.sort_unstable();
    assert_eq!(buckets, (0..replicas).collect::<Vec<_>>());
}

#[test]
fn the_example_configs_are_valid() {
    for object in read_yaml_documents(&kube_dir().join("switch-poller-secret.yaml")) {
        let config = object["stringData"]["config.yml"].as_str().unwrap();
        let dir = tempfile::tempdir().unwrap();
        // check-config reads the secrets as serve would: the Secret's mount, here a directory.
        let mount = "/etc/rdma-fabric-exporter/";
        assert!(config.contains(mount), "{config}");
        std::fs::write(dir.path().join("community"), "public\n").unwrap();
        let config = config.replace(mount, &format!("{}/", dir.path().display()));
        let path = dir.path().join("config.yml");
        std::fs::write(&path, config).unwrap();
        let (code, _, stderr) =
            common::run(&["check-config", "--config.file", common::path_str(&path)]);
        assert_eq!(code, 0, "{stderr}");
    }
    let path = project_root().join("deploy/systemd/config.yml");
    let (code, _, stderr) =
        common::run(&["check-config", "--config.file", common::path_str(&path)]);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn systemd_accepts_the_unit() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        return common::skip_or_fail("systemd-analyze not installed (Debian package `systemd`)");
    }
    let unit =
        std::fs::read_to_string(project_root().join("deploy/systemd/rdma-fabric-exporter.service"))
            .unwrap();
    // What the exporter would raise its soft limit to, given here: it may not call setrlimit.
    let nofile = format!(
        "LimitNOFILE={}\n",
        rdma_fabric_exporter::node::tree_cache::WANTED_SOFT_NOFILE
    );
    for setting in [
        "DynamicUser=yes",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=\n",
        "ReadOnlyPaths=/sys",
        // A filtered call is an error the exporter handles, not a SIGSYS.
        "SystemCallErrorNumber=EPERM\n",
        &nofile,
    ] {
        assert!(unit.contains(setting), "{setting}");
    }
    // The unit names the installed binary; verify it against the one just built.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rdma-fabric-exporter.service");
    std::fs::write(
        &path,
        unit.replace(
            "/usr/local/bin/rdma-fabric-exporter",
            common::binary().to_str().unwrap(),
        ),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && !text.contains("rdma-fabric-exporter.service:"),
        "{text}"
    );
}

/// The localizer's unit: hardened as the agent's, no /sys, no netlink; systemd accepts it.
#[test]
fn systemd_accepts_the_localizer_unit() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        return common::skip_or_fail("systemd-analyze not installed (Debian package `systemd`)");
    }
    let unit = std::fs::read_to_string(
        project_root().join("deploy/systemd/rdma-fabric-exporter-localizer.service"),
    )
    .unwrap();
    for setting in [
        "DynamicUser=yes",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=\n",
        "PrivateDevices=yes",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6\n",
        " localize --prometheus=${RFE_PROMETHEUS} ",
    ] {
        assert!(unit.contains(setting), "{setting}");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rdma-fabric-exporter-localizer.service");
    std::fs::write(
        &path,
        unit.replace(
            "/usr/local/bin/rdma-fabric-exporter",
            common::binary().to_str().unwrap(),
        ),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && !text.contains("rdma-fabric-exporter-localizer.service:"),
        "{text}"
    );
}

/// The InfiniBand scanner: one replica on chosen hosts only, never two at once, unprivileged,
/// the umad device through a device plugin resource rather than a privileged hostPath.
#[test]
fn the_ib_fabric_scanner_runs_once_per_subnet_unprivileged_on_chosen_hosts() {
    let objects = render(&kube_dir());
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "rdma-ib-fabric")
        .expect("the ib-fabric Deployment");
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], 1);
    assert_eq!(spec["strategy"]["type"], "Recreate");
    let pod = &spec["template"]["spec"];
    assert!(pod["nodeSelector"]
        .as_mapping()
        .is_some_and(|m| !m.is_empty()));
    assert!(pod["hostNetwork"].is_null());
    assert!(
        pod["volumes"].is_null(),
        "no hostPath: the device comes from the device plugin"
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(security["privileged"], false);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"][0], "ALL");
    let added: Vec<&str> = security["capabilities"]["add"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(added, ["IPC_LOCK"]);
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args.contains(&"--collector.ib_fabric"), "{args:?}");
    assert!(
        args.iter()
            .any(|a| a.starts_with("--collector.ib_fabric.shard=")),
        "{args:?}"
    );
    assert!(container["resources"]["limits"]
        .as_mapping()
        .unwrap()
        .keys()
        .any(|k| k.as_str().is_some_and(|k| k.starts_with("rdma/"))));
}

/// The localizer: one replica, no privilege, reading the cluster's Prometheus, scraped with
/// its verdicts' own `cluster`; in every kustomization that ships the alerts reading it.
#[test]
fn the_localizer_runs_once_unprivileged_and_is_scraped_with_its_labels() {
    for kustomization in [
        kube_dir(),
        kube_dir().join("overlays/sharded-switch-poller"),
    ] {
        let objects = render(&kustomization);
        let deployment = objects
            .iter()
            .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "rdma-localizer")
            .unwrap_or_else(|| panic!("{}: no localizer", kustomization.display()));
        let spec = &deployment["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(spec["strategy"]["type"], "Recreate");
        let pod = &spec["template"]["spec"];
        assert_eq!(pod["automountServiceAccountToken"], false);
        assert!(pod["hostNetwork"].is_null() && pod["volumes"].is_null());
        let container = &pod["containers"][0];
        let args: Vec<&str> = container["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(args[0], "localize");
        assert!(
            args.iter().any(|a| a.starts_with("--prometheus=http://")),
            "{args:?}"
        );
        let security = &container["securityContext"];
        assert_eq!(security["allowPrivilegeEscalation"], false);
        assert_eq!(security["capabilities"]["drop"][0], "ALL");
        assert!(security["capabilities"]["add"].is_null());
        let monitor = objects
            .iter()
            .find(|o| o["kind"] == "PodMonitor" && o["metadata"]["name"] == "rdma-localizer")
            .unwrap_or_else(|| panic!("{}: no localizer PodMonitor", kustomization.display()));
        let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
        assert_eq!(endpoint["honorLabels"], true);
        assert_eq!(
            monitor["spec"]["selector"]["matchLabels"],
            spec["selector"]["matchLabels"]
        );
    }
    // Without the operator the pod is there, for pod discovery.
    let objects = render(&kube_dir().join("overlays/without-operator"));
    assert!(objects
        .iter()
        .any(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "rdma-localizer"));
}
