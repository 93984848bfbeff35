//! The demo's landing page and `/api/v1/fabric`: every simulated host's node agent, the leaves
//! the switch poller reads, and the scenario with its phase, drawn by `web::fabric_page`.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;

use super::demo::Demo;
use super::scenario::{CYCLE_S, FAULT_END_S, FAULT_START_S};
use crate::web::fabric_json::{self, FabricView, HostFeed, ScenarioView};
use crate::web::fabric_page::{self, Links};

/// Where the fabric is in its scenario's cycle.
pub fn scenario_view(demo: &Demo) -> ScenarioView {
    let (name, time_s) = demo.scenario_now();
    let into = time_s.rem_euclid(CYCLE_S);
    let phase = if into < FAULT_START_S {
        "healthy lead-in"
    } else if into < FAULT_END_S {
        "fault"
    } else {
        "recovery"
    };
    ScenarioView {
        name: name.as_str(),
        phase,
        seconds_into_cycle: into,
        cycle_seconds: CYCLE_S,
        signature: name.signature(),
    }
}

/// The fabric as the demo's agents and poller last read it.
pub async fn view(demo: &Demo) -> FabricView {
    let hosts: Vec<HostFeed> = demo
        .hosts
        .iter()
        .filter_map(|(name, state)| {
            Some(HostFeed {
                name: name.clone(),
                node: state.node.clone()?,
                storm: state.storm.clone(),
                probe: state.probe.clone(),
            })
        })
        .collect();
    fabric_json::build(
        "demo",
        &hosts,
        demo.state.switches.as_deref(),
        Some(scenario_view(demo)),
        &demo.state.fabric_rates,
    )
    .await
}

pub async fn landing_page(State(demo): State<Arc<Demo>>) -> Response {
    let view = view(&demo).await;
    fabric_page::response(
        &view,
        &Links {
            telemetry_path: &demo.state.telemetry_path,
            demo_hosts: &demo.host_names,
        },
    )
}

pub async fn fabric_json(State(demo): State<Arc<Demo>>) -> Response {
    fabric_page::json_response(&view(&demo).await)
}
