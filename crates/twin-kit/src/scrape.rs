//! prometheus-operator scrape objects (`monitoring.coreos.com/v1`): a `ServiceMonitor` and a
//! `PodMonitor` for vLLM's `/metrics` (use one of them), and a `ServiceMonitor` for the GPU
//! Operator's dcgm-exporter on its `gpu-metrics` port (9400).
//!
//! Both vLLM objects rewrite `job` to [`KitOptions::job`]: the operator would otherwise set
//! it to the Service name (ServiceMonitor) or `<namespace>/<podmonitor>` (PodMonitor), and the
//! kit's availability and 5xx alerts select on `job`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::options::duration;
use crate::rules::{generated_header as header, to_yaml};
use crate::{KitError, KitOptions};

/// The dcgm-exporter Service of the NVIDIA GPU Operator: its name, label and port name.
pub const DCGM_SERVICE: &str = "nvidia-dcgm-exporter";
/// Port name of the GPU Operator's dcgm-exporter Service (port 9400).
pub const DCGM_PORT_NAME: &str = "gpu-metrics";

#[derive(Serialize)]
struct Monitor<S: Serialize> {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    metadata: Meta,
    spec: S,
}

#[derive(Serialize)]
struct Meta {
    name: String,
    namespace: String,
    labels: BTreeMap<String, String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ServiceMonitorSpec {
    selector: Selector,
    namespace_selector: NamespaceSelector,
    endpoints: Vec<Endpoint>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PodMonitorSpec {
    selector: Selector,
    namespace_selector: NamespaceSelector,
    pod_metrics_endpoints: Vec<Endpoint>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Selector {
    match_labels: BTreeMap<String, String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NamespaceSelector {
    match_names: Vec<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Endpoint {
    port: String,
    path: &'static str,
    interval: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    honor_labels: Option<bool>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    relabelings: Vec<Relabel>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Relabel {
    action: &'static str,
    target_label: &'static str,
    replacement: String,
}

fn meta(opts: &KitOptions, name: String, namespace: String) -> Meta {
    Meta {
        name,
        namespace,
        labels: BTreeMap::from([
            (
                "app.kubernetes.io/name".to_string(),
                opts.deployment.clone(),
            ),
            (
                "app.kubernetes.io/part-of".to_string(),
                "vllm-twin-kit".to_string(),
            ),
        ]),
    }
}

fn vllm_selector(opts: &KitOptions) -> Selector {
    Selector {
        match_labels: BTreeMap::from([(
            "app.kubernetes.io/name".to_string(),
            opts.deployment.clone(),
        )]),
    }
}

fn vllm_endpoint(opts: &KitOptions) -> Endpoint {
    Endpoint {
        port: opts.metrics_port_name.clone(),
        path: "/metrics",
        interval: duration(opts.scrape_interval_s),
        honor_labels: None,
        relabelings: vec![Relabel {
            action: "replace",
            target_label: "job",
            replacement: opts.job.clone(),
        }],
    }
}

/// `k8s/vllm-servicemonitor.yaml`.
pub fn service_monitor_yaml(opts: &KitOptions) -> Result<String, KitError> {
    let m = Monitor {
        api_version: "monitoring.coreos.com/v1",
        kind: "ServiceMonitor",
        metadata: meta(opts, opts.deployment.clone(), opts.namespace.clone()),
        spec: ServiceMonitorSpec {
            selector: vllm_selector(opts),
            namespace_selector: NamespaceSelector {
                match_names: vec![opts.namespace.clone()],
            },
            endpoints: vec![vllm_endpoint(opts)],
        },
    };
    Ok(header(&[
        "prometheus-operator ServiceMonitor for vLLM's /metrics. Use it or k8s/vllm-podmonitor.yaml, not both.",
        "It selects the Service labelled app.kubernetes.io/name=<deployment> and its named port; adjust to your labels.",
        "The operator adds namespace/pod/service/endpoint labels (the HPA's adapter needs namespace and pod);",
        "job is rewritten to the kit's job so the alerts match. Your Prometheus CR's serviceMonitorSelector must select it.",
    ]) + &to_yaml("ServiceMonitor", &m)?)
}

/// `k8s/vllm-podmonitor.yaml`.
pub fn pod_monitor_yaml(opts: &KitOptions) -> Result<String, KitError> {
    let m = Monitor {
        api_version: "monitoring.coreos.com/v1",
        kind: "PodMonitor",
        metadata: meta(opts, opts.deployment.clone(), opts.namespace.clone()),
        spec: PodMonitorSpec {
            selector: vllm_selector(opts),
            namespace_selector: NamespaceSelector {
                match_names: vec![opts.namespace.clone()],
            },
            pod_metrics_endpoints: vec![vllm_endpoint(opts)],
        },
    };
    Ok(header(&[
        "prometheus-operator PodMonitor for vLLM's /metrics, for Deployments without a Service. Use it or",
        "k8s/vllm-servicemonitor.yaml, not both. It scrapes the named container port of pods labelled",
        "app.kubernetes.io/name=<deployment>; job is rewritten to the kit's job so the alerts match.",
    ]) + &to_yaml("PodMonitor", &m)?)
}

/// `k8s/dcgm-exporter-servicemonitor.yaml`.
pub fn dcgm_service_monitor_yaml(opts: &KitOptions) -> Result<String, KitError> {
    let m = Monitor {
        api_version: "monitoring.coreos.com/v1",
        kind: "ServiceMonitor",
        metadata: meta(opts, DCGM_SERVICE.to_string(), opts.dcgm_namespace.clone()),
        spec: ServiceMonitorSpec {
            selector: Selector {
                match_labels: BTreeMap::from([("app".to_string(), DCGM_SERVICE.to_string())]),
            },
            namespace_selector: NamespaceSelector {
                match_names: vec![opts.dcgm_namespace.clone()],
            },
            endpoints: vec![Endpoint {
                port: DCGM_PORT_NAME.into(),
                path: "/metrics",
                interval: duration(opts.scrape_interval_s),
                // dcgm-exporter's pod mapping labels each GPU with the namespace/pod/container
                // using it; without honorLabels they would become exported_pod etc.
                honor_labels: Some(true),
                relabelings: vec![],
            }],
        },
    };
    Ok(header(&[
        "prometheus-operator ServiceMonitor for the GPU Operator's dcgm-exporter (Service nvidia-dcgm-exporter,",
        "port gpu-metrics = 9400). Skip it if the GPU Operator's dcgmExporter.serviceMonitor is enabled.",
        "honorLabels keeps the pod-mapping labels (namespace/pod/container of the GPU's workload).",
    ]) + &to_yaml("dcgm-exporter ServiceMonitor", &m)?)
}
