//! Which tool printed a text, from its content alone (a support bundle's file names say
//! little): ibqueryerrors' `Errors for`/`## Summary:`, iblinkinfo's `==( … )==>` links,
//! perfquery's `Name:.....value` fields, ibnetdiscover's node blocks or `-p` port lines.

use super::iblinkinfo::{self, LinkInfo};
use super::ibnetdiscover::{self, Discovery};
use super::ibqueryerrors::{self, QueryErrors};
use super::perfquery::{self, PerfQuery};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tool {
    Ibnetdiscover,
    Iblinkinfo,
    Perfquery,
    Ibqueryerrors,
}

impl Tool {
    pub fn as_str(self) -> &'static str {
        match self {
            Tool::Ibnetdiscover => "ibnetdiscover",
            Tool::Iblinkinfo => "iblinkinfo",
            Tool::Perfquery => "perfquery",
            Tool::Ibqueryerrors => "ibqueryerrors",
        }
    }
}

/// One tool's output, parsed.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    Ibnetdiscover(Discovery),
    Iblinkinfo(LinkInfo),
    Perfquery(PerfQuery),
    Ibqueryerrors(QueryErrors),
}

impl Parsed {
    pub fn tool(&self) -> Tool {
        match self {
            Parsed::Ibnetdiscover(_) => Tool::Ibnetdiscover,
            Parsed::Iblinkinfo(_) => Tool::Iblinkinfo,
            Parsed::Perfquery(_) => Tool::Perfquery,
            Parsed::Ibqueryerrors(_) => Tool::Ibqueryerrors,
        }
    }
}

/// No infiniband-diags tool's output in the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not the output of ibnetdiscover, iblinkinfo, perfquery or ibqueryerrors")]
pub struct NotDiagsOutput;

/// The first tool whose parser finds its own lines, in an order where no tool's text looks
/// like a later one's: ibqueryerrors' `--details` lines are iblinkinfo's, and iblinkinfo lines
/// would not pass for perfquery fields or ibnetdiscover ports.
pub fn parse_any(text: &str) -> Result<Parsed, NotDiagsOutput> {
    if let Ok(q) = ibqueryerrors::parse(text) {
        return Ok(Parsed::Ibqueryerrors(q));
    }
    if let Ok(l) = iblinkinfo::parse(text) {
        return Ok(Parsed::Iblinkinfo(l));
    }
    if let Ok(p) = perfquery::parse(text) {
        return Ok(Parsed::Perfquery(p));
    }
    if let Ok(d) = ibnetdiscover::parse(text) {
        return Ok(Parsed::Ibnetdiscover(d));
    }
    Err(NotDiagsOutput)
}
