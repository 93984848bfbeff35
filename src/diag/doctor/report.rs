//! Findings and how they are printed: human text grouped by device and port, or JSON.

use std::fmt::Write as _;

use serde::Serialize;

/// How bad a finding is. `Info` is for facts that cannot be checked here (a knob this kernel
/// does not expose): it never changes the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Ok,
    Info,
    Warn,
    Fail,
}

impl Severity {
    fn label(self) -> &'static str {
        match self {
            Severity::Ok => "OK",
            Severity::Info => "INFO",
            Severity::Warn => "WARN",
            Severity::Fail => "FAIL",
        }
    }
}

/// One check's result, with the fix in words when something is wrong.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub check: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    pub severity: Severity,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    /// A host-level finding (not tied to a device).
    pub fn host(check: &'static str, severity: Severity, message: impl Into<String>) -> Self {
        Finding {
            check,
            device: None,
            port: None,
            severity,
            message: message.into(),
            fix: None,
        }
    }

    pub fn device(
        check: &'static str,
        device: &str,
        severity: Severity,
        message: impl Into<String>,
    ) -> Self {
        Finding {
            device: Some(device.to_string()),
            ..Finding::host(check, severity, message)
        }
    }

    pub fn port(
        check: &'static str,
        device: &str,
        port: u32,
        severity: Severity,
        message: impl Into<String>,
    ) -> Self {
        Finding {
            port: Some(port),
            ..Finding::device(check, device, severity, message)
        }
    }

    pub(crate) fn with_fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

/// Counts per severity.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Summary {
    pub ok: usize,
    pub info: usize,
    pub warn: usize,
    pub fail: usize,
}

/// Everything one run found.
#[derive(Debug, Default)]
pub struct Report {
    pub findings: Vec<Finding>,
}

impl Report {
    pub fn add(&mut self, finding: Finding) {
        self.findings.push(finding);
    }

    pub fn extend(&mut self, findings: impl IntoIterator<Item = Finding>) {
        self.findings.extend(findings);
    }

    pub fn summary(&self) -> Summary {
        let mut summary = Summary::default();
        for finding in &self.findings {
            match finding.severity {
                Severity::Ok => summary.ok += 1,
                Severity::Info => summary.info += 1,
                Severity::Warn => summary.warn += 1,
                Severity::Fail => summary.fail += 1,
            }
        }
        summary
    }

    /// 0 healthy, 1 problems found (any WARN or FAIL).
    pub fn exit_status(&self) -> u8 {
        let summary = self.summary();
        u8::from(summary.warn + summary.fail > 0)
    }

    /// Host findings first, then each device and its ports, in the order the checks ran.
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        let host: Vec<&Finding> = self
            .findings
            .iter()
            .filter(|f| f.device.is_none())
            .collect();
        if !host.is_empty() {
            text.push_str("host\n");
            host.iter().for_each(|f| write_finding(&mut text, f, "  "));
        }
        let mut devices: Vec<&str> = Vec::new();
        for name in self.findings.iter().filter_map(|f| f.device.as_deref()) {
            if !devices.contains(&name) {
                devices.push(name);
            }
        }
        for device in devices {
            let _ = writeln!(text, "{device}");
            let of_device = || {
                self.findings
                    .iter()
                    .filter(move |f| f.device.as_deref() == Some(device))
            };
            of_device()
                .filter(|f| f.port.is_none())
                .for_each(|f| write_finding(&mut text, f, "  "));
            let mut ports: Vec<u32> = of_device().filter_map(|f| f.port).collect();
            ports.sort_unstable();
            ports.dedup();
            for port in ports {
                let _ = writeln!(text, "  port {port}");
                of_device()
                    .filter(|f| f.port == Some(port))
                    .for_each(|f| write_finding(&mut text, f, "    "));
            }
        }
        let summary = self.summary();
        let verdict = if self.exit_status() == 0 {
            "healthy"
        } else {
            "problems found"
        };
        let _ = writeln!(
            text,
            "summary: {} ok, {} info, {} warn, {} fail: {verdict} (exit {})",
            summary.ok,
            summary.info,
            summary.warn,
            summary.fail,
            self.exit_status()
        );
        text
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "findings": self.findings,
            "summary": self.summary(),
            "exit_status": self.exit_status(),
        })
    }
}

fn write_finding(text: &mut String, finding: &Finding, indent: &str) {
    let _ = writeln!(
        text,
        "{indent}{:<5} {}: {}",
        finding.severity.label(),
        finding.check,
        finding.message
    );
    if let Some(fix) = &finding.fix {
        let _ = writeln!(text, "{indent}      fix: {fix}");
    }
}
