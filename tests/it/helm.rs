//! The Helm chart (`deploy/helm/rdma-fabric-exporter`): `helm lint` and `helm template` of the
//! defaults and of every value file in its `ci/` directory, each rendered set validated as the
//! kustomize objects are (kubernetes-validate; the prometheus-operator objects by shape); the
//! defaults render what `deploy/kubernetes` applies, the sharded, pod-attribution and probe
//! values what their overlays apply; a values typo fails; the alerts and dashboards in the
//! chart are `alerts/` and `dashboards/` (`UPDATE_DEPLOY=1` copies them in).
//!
//! Helm: `$HELM`, else `/opt/helm/bin/helm` (where `scripts/test` installs it), else `helm` on
//! the PATH.

use crate::common;
use crate::deploy;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::project_root;
use serde::Deserialize;
use serde_yaml::Value;

const NAMESPACE: &str = "rdma-monitoring";
/// With this release name the chart's objects are named as the kustomize ones.
const RELEASE: &str = "rdma";

fn chart_dir() -> PathBuf {
    project_root().join("deploy/helm/rdma-fabric-exporter")
}

pub(crate) fn helm() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("HELM").map(PathBuf::from),
        Some(PathBuf::from("/opt/helm/bin/helm")),
        Some(PathBuf::from("helm")),
    ];
    candidates.into_iter().flatten().find(|helm| {
        Command::new(helm)
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Helm, or the test is skipped (fails under CI): `return` when this gives None.
fn helm_or_skip() -> Option<PathBuf> {
    let helm = helm();
    if helm.is_none() {
        common::skip_or_fail("helm not installed (scripts/test installs it into /opt/helm/bin)");
    }
    helm
}

fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `helm template RELEASE CHART -n NAMESPACE -f FILE... --set S...`: the objects, or helm's
/// error.
pub(crate) fn template(
    helm: &Path,
    values: &[PathBuf],
    sets: &[&str],
) -> Result<Vec<Value>, String> {
    let mut command = Command::new(helm);
    command
        .args(["template", RELEASE])
        .arg(chart_dir())
        .args(["--namespace", NAMESPACE]);
    for file in values {
        command.arg("--values").arg(file);
    }
    for set in sets {
        command.args(["--set", set]);
    }
    let out = command.output().unwrap();
    if !out.status.success() {
        return Err(output_text(&out));
    }
    let text = String::from_utf8(out.stdout).unwrap();
    Ok(serde_yaml::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{e}\n{text}")))
        .filter(|v| !v.is_null())
        .collect())
}

fn ci_values(name: &str) -> PathBuf {
    chart_dir().join("ci").join(name)
}

/// Every value file the chart's tests render (`ci/*.yaml`), sorted.
fn all_ci_values() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(chart_dir().join("ci"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in {:?}", kinds_and_names(objects)))
}

fn kinds_and_names(objects: &[Value]) -> Vec<String> {
    let mut ids: Vec<String> = objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect();
    ids.sort();
    ids
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_sequence()
        .map(|s| s.iter().map(|v| v.as_str().unwrap()).collect())
        .unwrap_or_default()
}

fn remove(value: &mut Value, key: &str) {
    if let Some(map) = value.as_mapping_mut() {
        map.remove(key);
    }
}

/// Whether `selector` (matchLabels or a Service's selector) selects pods labelled `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let selector = selector.as_mapping().expect("a selector");
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// What an object is made of, without what the chart adds for Helm's own bookkeeping (labels,
/// annotations, selectors with the release, pull policy): kind, name, and the spec (data of a
/// ConfigMap, the parsed config of the poller's Secret).
fn essential(object: &Value) -> (String, String, Value) {
    let kind = object["kind"].as_str().unwrap().to_string();
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    let mut body = match kind.as_str() {
        "ConfigMap" => object["data"].clone(),
        "ServiceAccount" => object["automountServiceAccountToken"].clone(),
        "Secret" => {
            let mut data = object["stringData"].clone();
            let config: Value =
                serde_yaml::from_str(data["config.yml"].as_str().unwrap_or("null")).unwrap();
            data["config.yml"] = config;
            data
        }
        _ => object["spec"].clone(),
    };
    match kind.as_str() {
        "DaemonSet" | "Deployment" | "StatefulSet" => {
            remove(&mut body, "selector");
            remove(&mut body["template"], "metadata");
            for container in body["template"]["spec"]["containers"]
                .as_sequence_mut()
                .unwrap()
            {
                remove(container, "imagePullPolicy");
            }
        }
        "Service" | "ServiceMonitor" | "PodMonitor" => remove(&mut body, "selector"),
        _ => {}
    }
    (kind, name, body)
}

/// The chart's names for the two objects the kustomization names after the project.
fn kustomize_name(kind: &str, chart_name: &str) -> String {
    match (kind, chart_name) {
        ("PrometheusRule", "rdma-rules") => "rdma-fabric-exporter".into(),
        ("ConfigMap", "rdma-dashboards") => "rdma-fabric-exporter-dashboards".into(),
        _ => chart_name.into(),
    }
}

/// The chart's objects equal the kustomization's, essential part by essential part (the
/// kustomization's Namespace aside: Helm installs into one).
fn assert_same_objects(chart: &[Value], kustomization: &Path) {
    let from_kustomize: BTreeMap<(String, String), Value> = deploy::render(kustomization)
        .iter()
        .filter(|o| o["kind"] != "Namespace")
        .map(|o| {
            let (kind, name, body) = essential(o);
            ((kind, name), body)
        })
        .collect();
    let from_chart: BTreeMap<(String, String), Value> = chart
        .iter()
        .map(|o| {
            let (kind, name, body) = essential(o);
            let name = kustomize_name(&kind, &name);
            ((kind, name), body)
        })
        .collect();
    assert_eq!(
        from_chart.keys().collect::<Vec<_>>(),
        from_kustomize.keys().collect::<Vec<_>>(),
        "{}",
        kustomization.display()
    );
    for (key, expected) in &from_kustomize {
        let got = &from_chart[key];
        assert!(
            got == expected,
            "{key:?} differs from {}:\nchart:\n{}\nkustomize:\n{}",
            kustomization.display(),
            serde_yaml::to_string(got).unwrap(),
            serde_yaml::to_string(expected).unwrap()
        );
    }
}

/// Every object of one release: in the namespace, labelled as Helm's, each workload selecting
/// its own pods, each Service and monitor selecting a workload's pods.
fn assert_consistent(objects: &[Value], what: &str) {
    let mut pod_labels = Vec::new();
    for object in objects {
        let kind = object["kind"].as_str().unwrap();
        let metadata = &object["metadata"];
        assert!(
            metadata["name"].is_string(),
            "{what}: {kind} without a name"
        );
        assert_eq!(
            metadata["labels"]["app.kubernetes.io/managed-by"], "Helm",
            "{what}: {kind}"
        );
        if matches!(kind, "DaemonSet" | "Deployment" | "StatefulSet") {
            let labels = &object["spec"]["template"]["metadata"]["labels"];
            assert!(
                selects(&object["spec"]["selector"]["matchLabels"], labels),
                "{what}: {kind} {:?} does not select its pods",
                metadata["name"]
            );
            pod_labels.push(labels.clone());
        }
    }
    for object in objects {
        let selector = match object["kind"].as_str().unwrap() {
            "Service" => &object["spec"]["selector"],
            "ServiceMonitor" | "PodMonitor" => &object["spec"]["selector"]["matchLabels"],
            _ => continue,
        };
        assert!(
            pod_labels.iter().any(|labels| selects(selector, labels)),
            "{what}: {:?} {:?} selects no pod of the release",
            object["kind"],
            object["metadata"]["name"]
        );
    }
}

fn kubernetes_validate_installed() -> bool {
    let program = std::env::var("KUBERNETES_VALIDATE")
        .unwrap_or_else(|_| "/opt/kubernetes-validate/bin/kubernetes-validate".into());
    Command::new(program).arg("--version").output().is_ok()
}

/// The chart's copies of the rule files and dashboards equal the originals (`UPDATE_DEPLOY=1`
/// copies them): Helm reads no file outside the chart.
#[test]
fn the_charts_alerts_and_dashboards_are_the_projects() {
    let mut expected = Vec::new();
    for file in ["alerts/rdma-rules.yml", "alerts/rdma-alerts.yml"] {
        expected.push(file.to_string());
    }
    let mut dashboards: Vec<String> = std::fs::read_dir(project_root().join("dashboards"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".json"))
        .map(|name| format!("dashboards/{name}"))
        .collect();
    dashboards.sort();
    assert!(dashboards.len() >= 3, "{dashboards:?}");
    expected.extend(dashboards);
    let files = chart_dir().join("files");
    let update = std::env::var_os("UPDATE_DEPLOY").is_some();
    if update {
        for dir in ["alerts", "dashboards"] {
            let _ = std::fs::remove_dir_all(files.join(dir));
            std::fs::create_dir_all(files.join(dir)).unwrap();
        }
    }
    for file in &expected {
        let original = std::fs::read(project_root().join(file)).unwrap();
        let copy = files.join(file);
        if update {
            std::fs::write(&copy, &original).unwrap();
        }
        assert!(
            std::fs::read(&copy).is_ok_and(|c| c == original),
            "{} differs from {file}: run UPDATE_DEPLOY=1 cargo test --test it helm::",
            copy.display()
        );
    }
    // And nothing else: a dashboard removed from dashboards/ leaves the chart too.
    let mut in_chart = Vec::new();
    for dir in ["alerts", "dashboards"] {
        for entry in std::fs::read_dir(files.join(dir)).unwrap() {
            in_chart.push(format!(
                "{dir}/{}",
                entry.unwrap().file_name().to_string_lossy()
            ));
        }
    }
    in_chart.sort();
    let mut expected_sorted = expected.clone();
    expected_sorted.sort();
    assert_eq!(
        in_chart,
        expected_sorted,
        "stale files in {}: run UPDATE_DEPLOY=1 cargo test --test it helm::",
        files.display()
    );
}

#[test]
fn helm_lint_passes_for_the_defaults_and_every_ci_values_file() {
    let Some(helm) = helm_or_skip() else { return };
    let mut cases = vec![None];
    cases.extend(all_ci_values().into_iter().map(Some));
    assert!(cases.len() >= 7, "{cases:?}");
    for values in cases {
        let mut command = Command::new(&helm);
        command.args(["lint", "--strict"]).arg(chart_dir());
        if let Some(values) = &values {
            command.arg("--values").arg(values);
        }
        let out = command.output().unwrap();
        let text = output_text(&out);
        assert!(out.status.success(), "{values:?}: {text}");
        assert!(text.contains("0 chart(s) failed"), "{values:?}: {text}");
    }
}

/// Each value file renders, and what it renders validates against the pinned Kubernetes schema.
#[test]
fn every_values_file_renders_objects_that_validate() {
    let Some(helm) = helm_or_skip() else { return };
    if !kubernetes_validate_installed() {
        return common::skip_or_fail(
            "kubernetes-validate not installed (scripts/test installs it into /opt/kubernetes-validate)",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cases = vec![("defaults".to_string(), Vec::new())];
    for file in all_ci_values() {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        cases.push((name, vec![file]));
    }
    for (name, values) in cases {
        let objects = template(&helm, &values, &[]).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            objects.len() >= 3,
            "{name}: {:?}",
            kinds_and_names(&objects)
        );
        assert_consistent(&objects, &name);
        for object in &objects {
            assert_eq!(
                object["metadata"]["namespace"].as_str(),
                Some(
                    if name == "existing-secret-values.yaml" && object["kind"] == "ConfigMap" {
                        "grafana"
                    } else {
                        NAMESPACE
                    }
                ),
                "{name}: {:?}",
                object["metadata"]["name"]
            );
        }
        deploy::validate(&objects, dir.path());
    }
}

#[test]
fn the_defaults_render_what_the_kustomization_applies() {
    let Some(helm) = helm_or_skip() else { return };
    let objects = template(&helm, &[], &[]).unwrap();
    assert_same_objects(&objects, &deploy::kube_dir());
    // The rule groups are alerts/'s, in the same order, as in the kustomize PrometheusRule.
    let rule = find(&objects, "PrometheusRule", "rdma-rules");
    assert_eq!(rule["spec"], deploy::prometheus_rule()["spec"]);
    assert_eq!(rule["metadata"]["labels"]["role"], "alert-rules");
    let dashboards = find(&objects, "ConfigMap", "rdma-dashboards");
    assert_eq!(dashboards["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(dashboards["data"], deploy::dashboards_config_map()["data"]);
}

#[test]
fn the_sharded_values_render_the_sharded_overlay() {
    let Some(helm) = helm_or_skip() else { return };
    let objects = template(&helm, &[ci_values("sharded-poller-values.yaml")], &[]).unwrap();
    assert_same_objects(
        &objects,
        &deploy::kube_dir().join("overlays/sharded-switch-poller"),
    );
    // Three replicas: three Probes, buckets 0..3 of modulus 3, each to its replica.
    let objects = template(
        &helm,
        &[ci_values("sharded-poller-values.yaml")],
        &["switchPoller.shards=3"],
    )
    .unwrap();
    let poller = find(&objects, "StatefulSet", "rdma-switch-poller");
    assert_eq!(poller["spec"]["replicas"], 3);
    let args = strings(&poller["spec"]["template"]["spec"]["containers"][0]["args"]);
    assert!(
        args.contains(&"--switch.shard=$(SHARD_INDEX)/3"),
        "{args:?}"
    );
    let mut buckets = Vec::new();
    for probe in objects.iter().filter(|o| o["kind"] == "Probe") {
        let rules = &probe["spec"]["targets"]["staticConfig"]["relabelingConfigs"];
        assert_eq!(rules[0]["action"], "hashmod");
        assert_eq!(rules[0]["modulus"], 3);
        let bucket = rules[1]["regex"].as_str().unwrap().to_string();
        assert_eq!(
            probe["spec"]["prober"]["url"],
            format!("rdma-switch-poller-{bucket}.rdma-switch-poller-shards.{NAMESPACE}.svc:9866")
                .as_str()
        );
        buckets.push(bucket);
    }
    assert_eq!(buckets, ["0", "1", "2"]);
}

/// Pod attribution is one value: the DaemonSet is the overlay's, and the agent is scraped by a
/// PodMonitor with the ServiceMonitor's two endpoints.
#[test]
fn pod_attribution_is_one_value_and_renders_the_overlays_daemonset() {
    let Some(helm) = helm_or_skip() else { return };
    let objects = template(&helm, &[ci_values("pod-attribution-values.yaml")], &[]).unwrap();
    let overlay = deploy::render(&deploy::kube_dir().join("overlays/pod-attribution"));
    let expected = overlay.iter().find(|o| o["kind"] == "DaemonSet").unwrap();
    let daemonset = find(&objects, "DaemonSet", "rdma-node-agent");
    assert_eq!(essential(daemonset), essential(expected));
    assert!(!objects.iter().any(|o| o["kind"] == "ServiceMonitor"));
    let monitor = find(&objects, "PodMonitor", "rdma-node-agent");
    let endpoints = monitor["spec"]["podMetricsEndpoints"]
        .as_sequence()
        .unwrap();
    let jobs: Vec<&Value> = endpoints
        .iter()
        .map(|e| &e["relabelings"][1]["replacement"])
        .collect();
    assert_eq!(jobs, ["rdma-node", "rdma-node-fast"]);
    assert!(selects(
        &monitor["spec"]["selector"]["matchLabels"],
        &daemonset["spec"]["template"]["metadata"]["labels"]
    ));
}

/// The agent's container resources of one kind (requests or limits) by name.
fn resource_names(container: &Value, kind: &str) -> Vec<String> {
    container["resources"][kind]
        .as_mapping()
        .map(|m| m.keys().map(|k| k.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// Probing between NICs is one value, off by default: the agent runs with --collector.probe
/// and a config file whose `probe:` section finds its peers through a headless Service of the
/// agents, asks for the RDMA device plugin's resource (overridable, or none), and gains no
/// capability nor root. The objects are the probe overlay's, and the config passes
/// check-config.
#[test]
fn probing_is_one_value_off_by_default_and_grants_no_capability() {
    let Some(helm) = helm_or_skip() else { return };
    let objects = template(&helm, &[ci_values("probe-values.yaml")], &[]).unwrap();
    let daemonset = find(&objects, "DaemonSet", "rdma-node-agent");
    let pod = &daemonset["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let args = strings(&container["args"]);
    let config_arg = "--config.file=/etc/rdma-fabric-exporter/config.yml";
    assert!(args.contains(&"--collector.probe"), "{args:?}");
    assert!(args.contains(&config_arg), "{args:?}");
    for kind in ["requests", "limits"] {
        assert_eq!(
            container["resources"][kind]["rdma/rdma_shared_device_a"], "1",
            "{kind}"
        );
    }
    // Nothing more than the base agent's rights: non-root, every capability dropped, none added.
    let security = &pod["securityContext"];
    assert_eq!(security["runAsNonRoot"], true);
    assert_eq!(security["runAsUser"], 65534);
    assert!(pod["hostPID"].is_null());
    let security = &container["securityContext"];
    assert_eq!(strings(&security["capabilities"]["drop"]), ["ALL"]);
    assert!(security["capabilities"]["add"].is_null(), "{security:?}");
    assert_eq!(security["privileged"], false);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    // The config file, mounted where the flag reads it; a changed config rolls the pods.
    let mount = container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "config")
        .expect("the config mount");
    assert_eq!(mount["mountPath"], "/etc/rdma-fabric-exporter");
    assert_eq!(mount["readOnly"], true);
    let volume = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "config")
        .unwrap();
    assert_eq!(volume["configMap"]["name"], "rdma-node-agent");
    assert!(
        daemonset["spec"]["template"]["metadata"]["annotations"]["checksum/config"].is_string()
    );
    let text = find(&objects, "ConfigMap", "rdma-node-agent")["data"]["config.yml"]
        .as_str()
        .unwrap();
    let config: Value = serde_yaml::from_str(text).unwrap();
    let peers_dns = format!("rdma-node-agent-peers.{NAMESPACE}.svc.cluster.local:9866");
    assert_eq!(config["probe"]["peers_dns"], peers_dns.as_str(), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yml");
    std::fs::write(&path, text).unwrap();
    let (code, _, stderr) =
        common::run(&["check-config", "--config.file", common::path_str(&path)]);
    assert_eq!(code, 0, "{text}: {stderr}");
    // The peers' Service: headless, selecting the agent pods, on the agent's port; not
    // selected by the agents' ServiceMonitor (no agent scraped twice).
    let service = find(&objects, "Service", "rdma-node-agent-peers");
    assert_eq!(service["spec"]["clusterIP"], "None");
    assert!(selects(
        &service["spec"]["selector"],
        &daemonset["spec"]["template"]["metadata"]["labels"]
    ));
    assert_eq!(service["spec"]["ports"][0]["port"], 9866);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "metrics");
    assert_eq!(container["ports"][0]["name"], "metrics");
    let monitor = find(&objects, "ServiceMonitor", "rdma-node-agent");
    assert!(!selects(
        &monitor["spec"]["selector"]["matchLabels"],
        &service["metadata"]["labels"]
    ));
    // The same objects as the kustomize overlay's, which validates.
    let overlay = deploy::render(&deploy::kube_dir().join("overlays/probe"));
    for (kind, name) in [
        ("DaemonSet", "rdma-node-agent"),
        ("ConfigMap", "rdma-node-agent"),
        ("Service", "rdma-node-agent-peers"),
    ] {
        assert_eq!(
            essential(find(&objects, kind, name)),
            essential(find(&overlay, kind, name)),
            "{kind} {name}"
        );
    }
    if kubernetes_validate_installed() {
        deploy::validate(&overlay, dir.path());
    }

    // Another device plugin's resource, another port, more probe keys.
    let objects = template(
        &helm,
        &[ci_values("probe-values.yaml")],
        &[
            "nodeAgent.probe.rdmaResource.name=rdma/hca_shared_devices_b",
            "nodeAgent.probe.clusterDomain=gpu.example",
            "nodeAgent.probe.config.traffic_class=104",
            "web.port=9900",
        ],
    )
    .unwrap();
    let container = &find(&objects, "DaemonSet", "rdma-node-agent")["spec"]["template"]["spec"]
        ["containers"][0];
    for kind in ["requests", "limits"] {
        assert_eq!(
            resource_names(container, kind),
            ["cpu", "memory", "rdma/hca_shared_devices_b"]
        );
    }
    assert_eq!(
        find(&objects, "Service", "rdma-node-agent-peers")["spec"]["ports"][0]["port"],
        9900
    );
    let text = find(&objects, "ConfigMap", "rdma-node-agent")["data"]["config.yml"]
        .as_str()
        .unwrap();
    let config: Value = serde_yaml::from_str(text).unwrap();
    assert_eq!(
        config["probe"]["peers_dns"],
        format!("rdma-node-agent-peers.{NAMESPACE}.svc.gpu.example:9900").as_str()
    );
    assert_eq!(config["probe"]["traffic_class"], 104);
    // No resource at all, when the devices come in some other way.
    let objects = template(
        &helm,
        &[ci_values("probe-values.yaml")],
        &["nodeAgent.probe.rdmaResource.name="],
    )
    .unwrap();
    let container = &find(&objects, "DaemonSet", "rdma-node-agent")["spec"]["template"]["spec"]
        ["containers"][0];
    for kind in ["requests", "limits"] {
        assert_eq!(resource_names(container, kind), ["cpu", "memory"]);
    }

    // Off by default: none of it.
    let objects = template(&helm, &[], &[]).unwrap();
    let daemonset = find(&objects, "DaemonSet", "rdma-node-agent");
    let container = &daemonset["spec"]["template"]["spec"]["containers"][0];
    let args = strings(&container["args"]);
    assert!(
        !args
            .iter()
            .any(|a| a.starts_with("--collector.probe") || a == &config_arg),
        "{args:?}"
    );
    for kind in ["requests", "limits"] {
        assert_eq!(resource_names(container, kind), ["cpu", "memory"]);
    }
    assert!(!container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .any(|m| m["name"] == "config"));
    assert!(daemonset["spec"]["template"]["metadata"]["annotations"].is_null());
    assert!(
        !objects.iter().any(|o| (o["kind"] == "Service"
            && o["metadata"]["name"] == "rdma-node-agent-peers")
            || (o["kind"] == "ConfigMap" && o["metadata"]["name"] == "rdma-node-agent")),
        "{:?}",
        kinds_and_names(&objects)
    );
}

#[test]
fn without_the_operator_no_custom_resource_and_pods_carry_scrape_annotations() {
    let Some(helm) = helm_or_skip() else { return };
    let objects = template(&helm, &[ci_values("without-operator-values.yaml")], &[]).unwrap();
    assert!(
        objects
            .iter()
            .all(|o| o["apiVersion"] != "monitoring.coreos.com/v1"),
        "{:?}",
        kinds_and_names(&objects)
    );
    let workloads: Vec<&Value> = objects
        .iter()
        .filter(|o| matches!(o["kind"].as_str(), Some("DaemonSet" | "Deployment")))
        .collect();
    // The node agent, the switch poller, the InfiniBand scanner and the localizer.
    assert_eq!(workloads.len(), 4);
    for workload in workloads {
        let annotations = &workload["spec"]["template"]["metadata"]["annotations"];
        assert_eq!(annotations["prometheus.io/scrape"], "true", "{workload:?}");
        assert_eq!(annotations["prometheus.io/port"], "9866");
        assert_eq!(annotations["prometheus.io/path"], "/metrics");
    }
    // With the operator (the defaults), no pod asks to be scraped twice.
    for object in template(&helm, &[], &[]).unwrap() {
        assert!(
            object["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"].is_null()
        );
    }
}

#[test]
fn the_ib_fabric_values_render_one_scanner_per_shard() {
    let Some(helm) = helm_or_skip() else { return };
    let objects = template(&helm, &[ci_values("ib-fabric-values.yaml")], &[]).unwrap();
    let scanners: Vec<&Value> = objects
        .iter()
        .filter(|o| {
            o["kind"] == "Deployment"
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("rdma-ib-fabric"))
        })
        .collect();
    assert_eq!(scanners.len(), 3, "{:?}", kinds_and_names(&objects));
    let mut selectors = Vec::new();
    for (index, scanner) in scanners.iter().enumerate() {
        assert_eq!(
            scanner["metadata"]["name"],
            format!("rdma-ib-fabric-{index}").as_str()
        );
        assert_eq!(scanner["spec"]["replicas"], 1);
        assert_eq!(scanner["spec"]["strategy"]["type"], "Recreate");
        let pod = &scanner["spec"]["template"]["spec"];
        assert_eq!(
            pod["nodeSelector"]["rdma.example.org/ib-fabric-scanner"],
            "subnet-b"
        );
        let container = &pod["containers"][0];
        let args = strings(&container["args"]);
        assert!(
            args.contains(&format!("--collector.ib_fabric.shard={index}/3").as_str()),
            "{args:?}"
        );
        assert_eq!(args.last(), Some(&"--collector.ib_fabric.errors-only"));
        assert_eq!(
            container["resources"]["limits"]["rdma/hca_shared_devices_b"],
            "1"
        );
        assert_eq!(
            strings(&container["securityContext"]["capabilities"]["add"]),
            ["IPC_LOCK"]
        );
        selectors.push(scanner["spec"]["selector"]["matchLabels"].clone());
    }
    // Each Deployment owns its own pods only.
    for (i, selector) in selectors.iter().enumerate() {
        for (j, scanner) in scanners.iter().enumerate() {
            assert_eq!(
                selects(selector, &scanner["spec"]["template"]["metadata"]["labels"]),
                i == j
            );
        }
    }
    let monitor = find(&objects, "PodMonitor", "rdma-ib-fabric");
    for scanner in &scanners {
        assert!(selects(
            &monitor["spec"]["selector"]["matchLabels"],
            &scanner["spec"]["template"]["metadata"]["labels"]
        ));
    }
}

/// The localizer: on by default, one unprivileged replica reading the Prometheus given, its
/// PodMonitor keeping the verdicts' `cluster`; one value turns it off.
#[test]
fn the_localizer_is_one_replica_reading_the_prometheus_given() {
    let Some(helm) = helm_or_skip() else { return };
    let objects = template(
        &helm,
        &[],
        &[
            "localizer.prometheusUrl=http://prometheus.obs:9090",
            "localizer.selector=cluster=\"a\"",
        ],
    )
    .unwrap();
    let localizer = find(&objects, "Deployment", "rdma-localizer");
    assert_eq!(localizer["spec"]["replicas"], 1);
    let container = &localizer["spec"]["template"]["spec"]["containers"][0];
    let args = strings(&container["args"]);
    assert_eq!(args[0], "localize");
    assert!(
        args.contains(&"--prometheus=http://prometheus.obs:9090"),
        "{args:?}"
    );
    assert!(args.contains(&"--selector=cluster=\"a\""), "{args:?}");
    assert!(container["securityContext"]["capabilities"]["add"].is_null());
    let monitor = find(&objects, "PodMonitor", "rdma-localizer");
    assert_eq!(
        monitor["spec"]["podMetricsEndpoints"][0]["honorLabels"],
        true
    );
    assert!(selects(
        &monitor["spec"]["selector"]["matchLabels"],
        &localizer["spec"]["template"]["metadata"]["labels"]
    ));
    let off = template(&helm, &[], &["localizer.enabled=false"]).unwrap();
    assert!(
        !kinds_and_names(&off)
            .iter()
            .any(|n| n.contains("localizer")),
        "{:?}",
        kinds_and_names(&off)
    );
}

/// TLS and basic auth: the web config names the mounted certificate files, every component
/// runs with it, probes stop asking /healthz (it wants credentials), monitors scrape https.
#[test]
fn the_tls_values_serve_https_with_basic_auth_everywhere() {
    let Some(helm) = helm_or_skip() else { return };
    let objects = template(&helm, &[ci_values("tls-values.yaml")], &[]).unwrap();
    let secret = find(&objects, "Secret", "rdma-web-config");
    let web: Value =
        serde_yaml::from_str(secret["stringData"]["web.yml"].as_str().unwrap()).unwrap();
    let tls = &web["tls_server_config"];
    assert_eq!(tls["cert_file"], "/etc/rdma-fabric-exporter-tls/tls.crt");
    assert_eq!(tls["key_file"], "/etc/rdma-fabric-exporter-tls/tls.key");
    assert_eq!(
        tls["client_ca_file"],
        "/etc/rdma-fabric-exporter-tls/ca.crt"
    );
    assert_eq!(tls["client_auth_type"], "RequireAndVerifyClientCert");
    assert_eq!(tls["min_version"], "TLS13");
    assert!(web["basic_auth_users"]["prometheus"]
        .as_str()
        .unwrap()
        .starts_with("$2y$"));
    let mut workloads = 0;
    for object in &objects {
        if !matches!(object["kind"].as_str(), Some("DaemonSet" | "Deployment")) {
            continue;
        }
        workloads += 1;
        let pod = &object["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        let args = strings(&container["args"]);
        assert!(
            args.contains(&"--web.config.file=/etc/rdma-fabric-exporter-web/web.yml"),
            "{args:?}"
        );
        let mounts = container["volumeMounts"].as_sequence().unwrap();
        for (volume, path) in [
            ("web-config", "/etc/rdma-fabric-exporter-web"),
            ("web-tls", "/etc/rdma-fabric-exporter-tls"),
        ] {
            assert!(
                mounts.iter().any(|m| m["name"] == volume
                    && m["mountPath"] == path
                    && m["readOnly"] == true),
                "{mounts:?}"
            );
        }
        let secrets: Vec<&Value> = pod["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|v| &v["secret"]["secretName"])
            .collect();
        assert!(secrets.contains(&&Value::from("rdma-web-config")));
        assert!(secrets.contains(&&Value::from("rdma-exporter-tls")));
        for probe in ["livenessProbe", "readinessProbe"] {
            assert_eq!(container[probe]["tcpSocket"]["port"], "metrics");
            assert!(container[probe]["httpGet"].is_null());
        }
    }
    // The node agent, the switch poller, the InfiniBand scanner and the localizer.
    assert_eq!(workloads, 4);
    for object in &objects {
        let endpoints = match object["kind"].as_str() {
            Some("ServiceMonitor") => &object["spec"]["endpoints"],
            Some("PodMonitor") => &object["spec"]["podMetricsEndpoints"],
            _ => continue,
        };
        for endpoint in endpoints.as_sequence().unwrap() {
            assert_eq!(endpoint["scheme"], "https", "{object:?}");
        }
    }
    let agent_monitor = find(&objects, "ServiceMonitor", "rdma-node-agent");
    assert_eq!(
        agent_monitor["spec"]["endpoints"][0]["basicAuth"]["username"]["name"],
        "rdma-exporter-scrape"
    );
    let probe = find(&objects, "Probe", "rdma-switches");
    assert_eq!(probe["spec"]["prober"]["scheme"], "https");
    assert!(probe["spec"]["basicAuth"].is_mapping());

    // TLS without naming its Secret is refused at render time.
    let error = template(&helm, &[], &["web.tls.enabled=true"]).unwrap_err();
    assert!(error.contains("web.tls.secretName"), "{error}");
}

/// The operator's own Secret, image by digest, pull secrets, extra args and volumes.
#[test]
fn the_existing_secret_values_use_the_operators_secret_and_image() {
    let Some(helm) = helm_or_skip() else { return };
    let objects = template(&helm, &[ci_values("existing-secret-values.yaml")], &[]).unwrap();
    assert!(
        !objects.iter().any(|o| o["kind"] == "Secret"),
        "no credentials rendered from values"
    );
    let poller = find(&objects, "Deployment", "fabric-switch-poller");
    let pod = &poller["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"][0]["secret"]["secretName"],
        "switch-credentials"
    );
    assert_eq!(pod["imagePullSecrets"][0]["name"], "registry-example-org");
    let image = pod["containers"][0]["image"].as_str().unwrap();
    assert_eq!(
        image,
        "registry.example.org/mirror/rdma-fabric-exporter@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    );
    assert_eq!(pod["containers"][0]["imagePullPolicy"], "Always");
    assert_eq!(pod["tolerations"][0]["key"], "dedicated");
    let probe = find(&objects, "Probe", "fabric-switches");
    assert_eq!(
        strings(&probe["spec"]["targets"]["staticConfig"]["static"]),
        ["leaf1", "leaf2", "spine1"]
    );
    assert_eq!(
        probe["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    let agent = find(&objects, "DaemonSet", "fabric-node-agent");
    assert_eq!(agent["metadata"]["labels"]["team"], "network");
    assert_eq!(agent["spec"]["updateStrategy"]["type"], "OnDelete");
    let pod = &agent["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "rdma-agent");
    assert_eq!(pod["priorityClassName"], "rdma-critical");
    assert_eq!(
        pod["nodeSelector"]["node.kubernetes.io/instance-type"],
        "gpu-h100"
    );
    let container = &pod["containers"][0];
    assert!(container["ports"][0]["hostPort"].is_null());
    let args = strings(&container["args"]);
    assert_eq!(
        &args[args.len() - 2..],
        [
            "--log.level=debug",
            "--collector.infiniband.device-exclude=^mlx5_bond"
        ]
    );
    assert_eq!(container["volumeMounts"][1]["name"], "nccl-logs");
    assert_eq!(pod["volumes"][1]["hostPath"]["path"], "/var/log/nccl");
    let monitor = find(&objects, "ServiceMonitor", "fabric-node-agent");
    assert_eq!(
        monitor["spec"]["endpoints"].as_sequence().unwrap().len(),
        1,
        "fastStorm off: the full scrape alone"
    );
    assert_eq!(
        find(&objects, "ServiceAccount", "rdma-agent")["automountServiceAccountToken"],
        false
    );

    // An existingSecret without the switch names to probe is refused.
    let error = template(&helm, &[], &["switchPoller.existingSecret=mine"]).unwrap_err();
    assert!(error.contains("switchPoller.targets"), "{error}");
}

/// values.schema.json refuses unknown keys, at any depth, in `--set` and in a values file, for
/// lint and template alike; and wrong types.
#[test]
fn a_values_typo_fails() {
    let Some(helm) = helm_or_skip() else { return };
    for (set, word) in [
        ("nodeAgent.tolerration[0].key=x", "tolerration"),
        ("nodeAgent.podAtribution.enabled=true", "podAtribution"),
        ("nodeAgent.probe.enabeld=true", "enabeld"),
        ("nodeAgent.probe.rdmaResource.count=0", "count"),
        ("switchPoler.shards=2", "switchPoler"),
        ("web.tls.clientAuth=RequireAnyClientCert", "clientAuth"),
        ("switchPoller.shards=0", "shards"),
        ("logFormat=xml", "logFormat"),
        ("image.digest=latest", "digest"),
    ] {
        let error = template(&helm, &[], &[set]).unwrap_err();
        assert!(error.contains(word), "{set}: {error}");
        let out = Command::new(&helm)
            .arg("lint")
            .arg(chart_dir())
            .args(["--set", set])
            .output()
            .unwrap();
        assert!(!out.status.success(), "lint accepted {set}");
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("typo.yaml");
    std::fs::write(&file, "nodeAgent:\n  resorces:\n    limits: {cpu: 1}\n").unwrap();
    let error = template(&helm, &[file], &[]).unwrap_err();
    assert!(error.contains("resorces"), "{error}");
}

/// The poller's config.yml the chart writes passes `check-config`, as the kustomize example's.
#[test]
fn the_charts_poller_config_is_valid() {
    let Some(helm) = helm_or_skip() else { return };
    let objects = template(&helm, &[], &[]).unwrap();
    let secret = find(&objects, "Secret", "rdma-switch-poller");
    let config = secret["stringData"]["config.yml"].as_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mount = "/etc/rdma-fabric-exporter/";
    assert!(config.contains(mount), "{config}");
    for (file, content) in secret["stringData"].as_mapping().unwrap() {
        std::fs::write(
            dir.path().join(file.as_str().unwrap()),
            content.as_str().unwrap(),
        )
        .unwrap();
    }
    let config = config.replace(mount, &format!("{}/", dir.path().display()));
    let path = dir.path().join("config.yml");
    std::fs::write(&path, config).unwrap();
    let (code, _, stderr) =
        common::run(&["check-config", "--config.file", common::path_str(&path)]);
    assert_eq!(code, 0, "{stderr}");
}

/// The README's `helm install` command, as `helm template`: the copyable command renders.
#[test]
fn the_readmes_helm_command_renders() {
    let Some(helm) = helm_or_skip() else { return };
    let readme = std::fs::read_to_string(project_root().join("README.md")).unwrap();
    let mut lines = readme
        .lines()
        .skip_while(|l| !l.starts_with("helm install "));
    let mut command = String::new();
    for line in lines.by_ref() {
        command.push_str(line.trim_end_matches('\\'));
        if !line.ends_with('\\') {
            break;
        }
    }
    let command = command
        .strip_prefix("helm install ")
        .expect("a `helm install` command in README.md");
    assert!(
        command.contains("deploy/helm/rdma-fabric-exporter"),
        "{command}"
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("\"$HELM\" template {command}"))
        .env("HELM", &helm)
        .current_dir(project_root())
        .output()
        .unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "{command}: {text}");
    assert!(text.contains("kind: DaemonSet"), "{text}");
    assert!(text.contains("secretName: switch-credentials"), "{text}");
}

/// The web config the chart writes, served for real: the exporter started with it (the
/// certificate paths moved from the Secret's mount to a temporary directory) answers https
/// with a client certificate and the password, and refuses a scrape without either.
#[test]
fn the_charts_web_config_serves_tls_client_certificates_and_basic_auth() {
    let Some(helm) = helm_or_skip() else { return };
    const PASSWORD: &str = "scrape-password";
    let hash = bcrypt::hash(PASSWORD, 4).unwrap();
    let objects = template(
        &helm,
        &[ci_values("tls-values.yaml")],
        &[&format!("web.basicAuthUsers.prometheus={hash}")],
    )
    .unwrap();
    let secret = find(&objects, "Secret", "rdma-web-config");
    let web = secret["stringData"]["web.yml"].as_str().unwrap();
    let pki = crate::web::Pki::new();
    let dir = tempfile::tempdir().unwrap();
    // The kubernetes.io/tls Secret's keys, as the chart mounts them.
    for (key, file) in [
        ("tls.crt", "server.pem"),
        ("tls.key", "server.key"),
        ("ca.crt", "ca.pem"),
    ] {
        std::fs::copy(pki.path(file), dir.path().join(key)).unwrap();
    }
    let mount = "/etc/rdma-fabric-exporter-tls/";
    assert!(web.contains(mount), "{web}");
    let config = dir.path().join("web.yml");
    std::fs::write(
        &config,
        web.replace(mount, &format!("{}/", dir.path().display())),
    )
    .unwrap();
    let exporter = common::Exporter::on_sysfs(
        &common::fixture("quirks/sys"),
        &["--web.config.file", common::path_str(&config)],
    );
    let port = exporter.address.rsplit_once(':').unwrap().1.to_string();
    let url = format!("https://localhost:{port}/metrics");
    let client = |with_certificate: bool| {
        let ca = reqwest::Certificate::from_pem(pki.ca_pem.as_bytes()).unwrap();
        let mut builder = reqwest::blocking::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .resolve("localhost", exporter.address.parse().unwrap());
        if with_certificate {
            let mut pem = std::fs::read(pki.path("client.pem")).unwrap();
            pem.extend(std::fs::read(pki.path("client.key")).unwrap());
            builder = builder.identity(reqwest::Identity::from_pem(&pem).unwrap());
        }
        builder.build().unwrap()
    };
    let response = client(true)
        .get(&url)
        .basic_auth("prometheus", Some(PASSWORD))
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["strict-transport-security"],
        "max-age=31536000"
    );
    assert!(response
        .text()
        .unwrap()
        .contains("rdma_exporter_build_info"));
    let response = client(true).get(&url).send().unwrap();
    assert_eq!(response.status(), 401, "no password");
    assert!(
        client(false)
            .get(&url)
            .basic_auth("prometheus", Some(PASSWORD))
            .send()
            .is_err(),
        "no client certificate: no handshake"
    );
}

/// `helm package` keeps everything the templates read (the alerts and dashboards in files/):
/// the packaged chart renders what the source tree renders.
#[test]
fn the_packaged_chart_renders_what_the_source_renders() {
    let Some(helm) = helm_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(&helm)
        .arg("package")
        .arg(chart_dir())
        .arg("--destination")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let chart = &deploy::read_yaml_documents(&chart_dir().join("Chart.yaml"))[0];
    // The image tag defaults to appVersion: the exporter's version.
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
    let package = dir.path().join(format!(
        "rdma-fabric-exporter-{}.tgz",
        chart["version"].as_str().unwrap()
    ));
    let out = Command::new(&helm)
        .args(["template", RELEASE])
        .arg(&package)
        .args(["--namespace", NAMESPACE])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let packaged: Vec<Value> =
        serde_yaml::Deserializer::from_str(&String::from_utf8(out.stdout).unwrap())
            .map(|doc| Value::deserialize(doc).unwrap())
            .filter(|v| !v.is_null())
            .collect();
    assert_eq!(packaged, template(&helm, &[], &[]).unwrap());
}
