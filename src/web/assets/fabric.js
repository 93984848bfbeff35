// The landing page's drawing: reads /api/v1/fabric (the path is the body's data-api) every
// 2 s and draws hosts, their NICs, the leaf switches and the LLDP wiring as inline SVG, and,
// where hosts probe, the failing probe paths between NICs and the suspect the localization
// names (a NIC, a host, a leaf, a leaf's uplinks, the spine layer, a slow responder), and a
// diamond on each NIC that stands out from its rail's other NICs (a gray failure). Every
// name goes in through textContent or attributes, never as markup: names come from outside.
"use strict";
(function () {
  var SVG = "http://www.w3.org/2000/svg";
  var POLL_MS = 2000;
  var NIC_W = 44, NIC_GAP = 6, HOST_PAD = 10, HOST_GAP = 24;
  var HOST_Y = 10, NIC_Y = 48, NIC_H = 40, BEND_Y = 330, LEAF_Y = 430, LEAF_H = 46;
  // The spine layer, drawn under the leaves where hosts probe: the probes see it, not the poller.
  var SPINE_Y = LEAF_Y + LEAF_H + 44, SPINE_H = 28;
  var SUSPECT = "◎";
  var OUTLIER = "◆";
  var SYMBOL = { "down": "✕", "storm-source": "⚠", "paused": "‖", "errors": "!",
    "cnp-ignored": "↯", "ecn-heavy": "≈", "no-rate": "…", "ok": "✓" };

  function el(name, attrs, text) {
    var node = document.createElementNS(SVG, name);
    for (var key in attrs) { node.setAttribute(key, String(attrs[key])); }
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  function html(name, text, cls) {
    var node = document.createElement(name);
    if (text !== undefined) { node.textContent = text; }
    if (cls) { node.className = cls; }
    return node;
  }

  function percent(share) { return Math.round(share * 100) + "%"; }

  function gbps(bytes) {
    return bytes === null || bytes === undefined ? "–" : (bytes * 8 / 1e9).toFixed(1) + " Gb/s";
  }

  // A NIC's details in words, for its tooltip.
  function details(host, nic) {
    var lines = [host.name + " " + nic.device + " port " + nic.port +
      (nic.netdev ? " (" + nic.netdev + ")" : ""), nic.label,
      "state " + (nic.state || "?") + ", " + (nic.phys_state || "?")];
    if (nic.switch) { lines.push("LLDP: " + nic.switch.switch + " " + nic.switch.port); }
    var r = nic.rates;
    if (r) {
      lines.push("rx " + gbps(r.rx_bytes_per_second) + ", tx " + gbps(r.tx_bytes_per_second));
      r.pause.forEach(function (p) {
        lines.push("PFC p" + p.priority + " " + p.direction + " paused " + percent(p.share));
      });
      if (r.ecn_marked_per_second !== null) {
        lines.push("ECN marks " + Math.round(r.ecn_marked_per_second) + "/s");
      }
      if (r.cnp_sent_per_second !== null) {
        lines.push("CNPs sent " + Math.round(r.cnp_sent_per_second) + "/s, handled " +
          Math.round(r.cnp_handled_per_second || 0) + "/s, ignored " +
          Math.round(r.cnp_ignored_per_second || 0) + "/s");
      }
      if (r.errors_per_second !== null) {
        lines.push("errors " + Math.round(r.errors_per_second) + "/s");
      }
    }
    nic.sampler.forEach(function (s) {
      lines.push("storm sampler: p" + s.priority + " " + s.direction + " " +
        percent(s.paused_share) + (s.in_storm ? " STORM" : "") + ", " + s.storms + " storms");
    });
    return lines.join("\n");
  }

  // A port's key in the drawing's maps.
  function portKey(host, device, port) {
    return host + "\u0000" + device + "\u0000" + port;
  }

  // What a verdict names, in a few words.
  function suspectName(v) {
    switch (v.kind) {
      case "nic": return "NIC " + v.host + " " + v.device + " port " + v.port;
      case "host": return "host " + v.host;
      case "leaf": return "leaf " + v.switch;
      case "uplink": return "uplinks of " + v.switch;
      case "spine": return "the spine layer";
      case "responder": return "slow responder " + v.host + " " + v.device + " port " + v.port;
      default: return v.kind;
    }
  }

  function addClass(node, name) {
    node.setAttribute("class", node.getAttribute("class") + " " + name);
  }

  // A dashed ring around a box, titled with the verdict's evidence.
  function ring(parent, x, y, w, h, v) {
    var r = el("rect", { x: x - 5, y: y - 5, width: w + 10, height: h + 10, rx: 8,
      "class": "suspect-ring", "data-kind": v.kind });
    r.appendChild(el("title", {}, SUSPECT + " " + suspectName(v) + ": " + v.evidence));
    parent.appendChild(r);
  }

  function draw(view) {
    var hosts = view.hosts;
    var probes = view.probes;
    var nicsMax = 1;
    hosts.forEach(function (h) { nicsMax = Math.max(nicsMax, h.nics.length); });
    var hostW = HOST_PAD * 2 + nicsMax * NIC_W + (nicsMax - 1) * NIC_GAP;
    var width = Math.max(900, hosts.length * hostW + (hosts.length + 1) * HOST_GAP);
    var height = probes ? SPINE_Y + SPINE_H + 12 : LEAF_Y + LEAF_H + 20;
    var svg = el("svg", { id: "fabric-svg", viewBox: "0 0 " + width + " " + height,
      width: "100%", role: "img", "aria-labelledby": "fabric-title" });
    svg.appendChild(el("title", { id: "fabric-title" },
      "Fabric: " + hosts.length + " host(s), their NICs and " + view.switches.length +
      " switch(es), each link labelled with its state; the tables below say the same in rows"));
    var links = el("g", { "class": "links" });
    var paths = el("g", { "class": "probe-paths" });
    var boxes = el("g", { "class": "boxes" });
    svg.appendChild(links);
    svg.appendChild(paths);
    svg.appendChild(boxes);
    var nicAt = {}, hostAt = {}, leafAt = {};

    // Leaves along the bottom; their ports in the order LLDP lists them.
    var switches = view.switches;
    var portAt = {};
    var leafW = switches.length ? (width - HOST_GAP * (switches.length + 1)) / switches.length : 0;
    switches.forEach(function (sw, i) {
      var x = HOST_GAP + i * (leafW + HOST_GAP);
      var g = el("g", { "class": "switch " + (sw.up ? "ok" : "down"), "data-switch": sw.name });
      g.appendChild(el("rect", { x: x, y: LEAF_Y, width: leafW, height: LEAF_H, rx: 6 }));
      g.appendChild(el("text", { x: x + leafW / 2, y: LEAF_Y + 20, "text-anchor": "middle",
        "class": "name" }, (sw.up ? "✓ " : "✕ ") + sw.name));
      g.appendChild(el("text", { x: x + leafW / 2, y: LEAF_Y + 38, "text-anchor": "middle",
        "class": "small" }, sw.up ? "polled, up" : "down: " + (sw.reason || "not polled yet")));
      g.appendChild(el("title", {}, sw.name + (sw.up ? " up" : " down " + (sw.reason || ""))));
      boxes.appendChild(g);
      leafAt[sw.name] = { x: x, w: leafW, g: g };
      var wired = sw.ports.filter(function (p) { return p.neighbor_host; });
      wired.forEach(function (p, k) {
        portAt[p.neighbor_host + "\u0000" + p.neighbor_port] =
          { x: x + (k + 1) * leafW / (wired.length + 1), y: LEAF_Y };
      });
    });
    if (!switches.length) {
      boxes.appendChild(el("text", { x: width / 2, y: LEAF_Y + 24, "text-anchor": "middle",
        "class": "small" }, "No switches configured: the far end of each link is not known."));
    }

    hosts.forEach(function (host, h) {
      var hx = HOST_GAP + h * (hostW + HOST_GAP);
      var g = el("g", { "class": "host", "data-host": host.name });
      g.appendChild(el("rect", { x: hx, y: HOST_Y, width: hostW, height: NIC_Y + NIC_H + 10 - HOST_Y, rx: 8 }));
      g.appendChild(el("text", { x: hx + HOST_PAD, y: HOST_Y + 22, "class": "name" }, host.name));
      boxes.appendChild(g);
      hostAt[host.name] = { x: hx, w: hostW, g: g, label: HOST_Y + 22 };
      host.nics.forEach(function (nic, n) {
        var nx = hx + HOST_PAD + n * (NIC_W + NIC_GAP);
        var cx = nx + NIC_W / 2;
        var status = nic.status;
        var ng = el("g", { "class": "nic " + status, "data-status": status,
          "data-device": nic.device, "data-netdev": nic.netdev || "" });
        ng.appendChild(el("rect", { x: nx, y: NIC_Y, width: NIC_W, height: NIC_H, rx: 4 }));
        ng.appendChild(el("text", { x: cx, y: NIC_Y + 16, "text-anchor": "middle", "class": "tiny" },
          nic.device));
        ng.appendChild(el("text", { x: cx, y: NIC_Y + 33, "text-anchor": "middle", "class": "sym" },
          SYMBOL[status] || "?"));
        ng.appendChild(el("title", {}, details(host, nic)));
        g.appendChild(ng);
        nicAt[portKey(host.name, nic.device, nic.port)] = { x: nx, cx: cx, g: ng, host: g };

        // The link: straight down from the NIC, then to its leaf port (or a stub).
        var end = portAt[host.name + "\u0000" + (nic.netdev || "")];
        var top = NIC_Y + NIC_H;
        var points = cx + "," + top + " " + cx + "," + BEND_Y + " " +
          (end ? end.x + "," + end.y : cx + "," + (BEND_Y + 30));
        var link = el("g", { "class": "link " + status, "data-status": status });
        link.appendChild(el("polyline", { points: points, fill: "none" }));
        link.appendChild(el("title", {}, details(host, nic)));
        // The state in words along the link: readable without colour.
        var lx = cx + 4, ly = top + 8;
        link.appendChild(el("text", { x: lx, y: ly, "class": "label",
          transform: "rotate(90 " + lx + " " + ly + ")" }, nic.label));
        links.appendChild(link);
      });
      var sources = view.storm_sources.filter(function (s) { return s.host === host.name; });
      if (sources.length) {
        g.appendChild(el("text", { x: hx + hostW - HOST_PAD, y: HOST_Y + 22, "text-anchor": "end",
          "class": "source" }, "⚠ storm source: " + sources.map(function (s) {
            return s.device; }).join(", ")));
        hostAt[host.name].label = HOST_Y + 36;
      }
    });
    // Gray failures: a diamond on each NIC far worse than its rail's other NICs.
    view.peer_outliers.forEach(function (o) {
      var nic = nicAt[portKey(o.host, o.device, o.port)];
      if (!nic) { return; }
      addClass(nic.g, "peer-outlier");
      var mark = el("text", { x: nic.x + NIC_W - 3, y: NIC_Y + 12, "text-anchor": "end",
        "class": "outlier-mark" }, OUTLIER);
      mark.appendChild(el("title", {}, OUTLIER + " " + o.host + " " + o.device + " " + o.evidence));
      nic.g.appendChild(mark);
    });
    if (probes) { drawProbes(probes, svg, paths, boxes, nicAt, hostAt, leafAt, width); }
    return svg;
  }

  // The failing paths as curves from NIC to NIC under the hosts, the spine layer under the
  // leaves with each leaf's uplinks, and a ring and a label on what each verdict names.
  function drawProbes(probes, svg, paths, boxes, nicAt, hostAt, leafAt, width) {
    var top = NIC_Y + NIC_H;
    probes.failing_paths.forEach(function (p) {
      var a = nicAt[portKey(p.from.host, p.from.device, p.from.port)];
      var b = nicAt[portKey(p.to.host, p.to.device, p.to.port)];
      if (!a || !b) { return; }
      // Longer paths dip lower; the two directions of one pair take slightly different curves.
      var dip = 40 + Math.min(BEND_Y - top - 60, Math.abs(a.cx - b.cx) / 4) +
        (a.cx < b.cx ? 0 : 12);
      var line = el("path", { "class": "probe-path", "data-from": portKey(p.from.host,
        p.from.device, p.from.port), "data-to": portKey(p.to.host, p.to.device, p.to.port),
        d: "M " + a.cx + " " + top + " C " + a.cx + " " + (top + dip) + " " + b.cx + " " +
          (top + dip) + " " + b.cx + " " + top,
        "stroke-width": (1.5 + 6 * p.loss_share).toFixed(1) });
      line.appendChild(el("title", {}, "⇢ " + p.from.host + " " + p.from.device + " → " +
        p.to.host + " " + p.to.device + ": lost " + p.lost + " of " + p.sent + " probes (" +
        percent(p.loss_share) + ")"));
      paths.appendChild(line);
    });

    var spine = el("g", { "class": "spine" });
    spine.appendChild(el("rect", { x: HOST_GAP, y: SPINE_Y, width: width - 2 * HOST_GAP,
      height: SPINE_H, rx: 6 }));
    spine.appendChild(el("text", { x: width / 2, y: SPINE_Y + 18, "text-anchor": "middle",
      "class": "small" }, "spine layer (ECMP: which spine a flow takes is the switches' secret)"));
    Object.keys(leafAt).forEach(function (name) {
      var leaf = leafAt[name];
      var uplinks = el("g", { "class": "uplink", "data-switch": name });
      [1, 2].forEach(function (k) {
        var x = leaf.x + k * leaf.w / 3;
        uplinks.appendChild(el("line", { x1: x, y1: LEAF_Y + LEAF_H, x2: x, y2: SPINE_Y }));
      });
      uplinks.appendChild(el("title", {}, name + "'s uplinks to the spine layer"));
      leaf.uplinks = uplinks;
      boxes.appendChild(uplinks);
    });
    boxes.appendChild(spine);

    // Per host, the NICs named (one line each for suspects and slow responders).
    var named = {};
    probes.verdicts.forEach(function (v) {
      var words = SUSPECT + " " + suspectName(v);
      if (v.kind === "nic" || v.kind === "responder") {
        var nic = nicAt[portKey(v.host, v.device, v.port)];
        if (!nic) { return; }
        addClass(nic.g, v.kind === "nic" ? "suspect" : "slow-responder");
        ring(nic.host, nic.x, NIC_Y, NIC_W, NIC_H, v);
        var lists = named[v.host] = named[v.host] || { nic: [], responder: [] };
        lists[v.kind].push(v.device);
      } else if (v.kind === "host") {
        var host = hostAt[v.host];
        if (!host) { return; }
        addClass(host.g, "suspect");
        ring(host.g, host.x, HOST_Y, host.w, NIC_Y + NIC_H + 10 - HOST_Y, v);
        host.g.appendChild(el("text", { x: host.x + host.w - HOST_PAD, y: host.label,
          "text-anchor": "end", "class": "suspect-label" }, words));
      } else if (v.kind === "leaf" || v.kind === "uplink") {
        var leaf = leafAt[v.switch];
        if (!leaf) { return; }
        if (v.kind === "leaf") {
          addClass(leaf.g, "suspect");
          ring(leaf.g, leaf.x, LEAF_Y, leaf.w, LEAF_H, v);
        } else {
          addClass(leaf.uplinks, "suspect");
          leaf.uplinks.appendChild(el("title", {}, words + ": " + v.evidence));
        }
        boxes.appendChild(el("text", { x: leaf.x + leaf.w / 2, y: LEAF_Y + LEAF_H + 26,
          "text-anchor": "middle", "class": "suspect-label", "data-kind": v.kind }, words));
      } else if (v.kind === "spine") {
        addClass(spine, "suspect");
        spine.appendChild(el("title", {}, words + ": " + v.evidence));
        spine.appendChild(el("text", { x: HOST_GAP + 10, y: SPINE_Y + 18,
          "class": "suspect-label" }, words));
      }
    });
    Object.keys(named).forEach(function (name) {
      var h = hostAt[name];
      if (!h) { return; }
      [["nic", SUSPECT + " probe suspect: "], ["responder", "⏱ slow responder: "]]
        .forEach(function (kind) {
          var devices = named[name][kind[0]];
          if (!devices.length) { return; }
          var list = devices.length > 2 ? devices.length + " NICs" : devices.join(", ");
          h.g.appendChild(el("text", { x: h.x + h.w - HOST_PAD, y: h.label,
            "text-anchor": "end", "class": "suspect-label host-label" }, kind[1] + list));
          h.label += 12;
        });
    });
  }

  function scenario(view) {
    var box = document.getElementById("scenario");
    if (!box) { return; }
    box.textContent = "";
    if (!view.scenario) { return; }
    var s = view.scenario;
    var title = html("h2", "Scenario ");
    title.appendChild(html("code", s.name));
    title.appendChild(document.createTextNode(": " + s.phase));
    box.appendChild(title);
    box.appendChild(html("p", Math.round(s.seconds_into_cycle) + " s into a " +
      Math.round(s.cycle_seconds) + " s cycle (60 s healthy, 180 s of the fault, 60 s of " +
      "recovery). During the fault: " + s.signature));
  }

  function storm(view) {
    var box = document.getElementById("storm");
    if (!box) { return; }
    box.textContent = "";
    box.appendChild(html("h2", "PFC storm source"));
    if (!view.storm_sources.length) {
      box.appendChild(html("p", "✓ None: no NIC pauses its switch port while receiving almost nothing.", "calm"));
      return;
    }
    var list = html("ul", undefined, "sources");
    view.storm_sources.forEach(function (s) {
      var item = html("li");
      item.appendChild(html("strong", "⚠ " + s.host + " " + s.device));
      item.appendChild(document.createTextNode(": " + s.evidence));
      list.appendChild(item);
    });
    box.appendChild(list);
  }

  // The NICs that stand out from their rail, as the storm sources.
  function outliers(view) {
    var box = document.getElementById("outliers");
    if (!box) { return; }
    box.textContent = "";
    box.appendChild(html("h2", "Peer outliers"));
    if (!view.peer_outliers.length) {
      box.appendChild(html("p", "✓ None: no NIC stands out from the other NICs of its rail.", "calm"));
      return;
    }
    var list = html("ul", undefined, "outliers");
    view.peer_outliers.forEach(function (o) {
      var item = html("li");
      item.setAttribute("data-host", o.host);
      item.setAttribute("data-device", o.device);
      item.appendChild(html("strong", OUTLIER + " " + o.host + " " + o.device + " port " + o.port));
      item.appendChild(document.createTextNode(": " + o.evidence));
      list.appendChild(item);
    });
    box.appendChild(list);
  }

  // The probes' verdicts with their evidence, as the storm sources'.
  function probeSuspects(view) {
    var box = document.getElementById("probes");
    if (!box) { return; }
    box.textContent = "";
    if (!view.probes) { return; }
    var p = view.probes;
    box.appendChild(html("h2", "Probe suspects"));
    box.appendChild(html("p", p.summary, p.failing_path_count ? "note" : "calm"));
    if (!p.verdicts.length) { return; }
    var list = html("ul", undefined, "suspects");
    p.verdicts.forEach(function (v) {
      var item = html("li");
      item.setAttribute("data-kind", v.kind);
      item.appendChild(html("strong", SUSPECT + " " + v.kind + ": " + suspectName(v)));
      item.appendChild(document.createTextNode(": " + v.evidence));
      list.appendChild(item);
    });
    box.appendChild(list);
  }

  function status(text) {
    var line = document.getElementById("live");
    if (line) { line.textContent = text; }
  }

  function render(view) {
    var drawing = document.getElementById("drawing");
    drawing.textContent = "";
    var live = html("p", "", "note");
    live.id = "live";
    drawing.appendChild(live);
    drawing.appendChild(draw(view));
    scenario(view);
    storm(view);
    outliers(view);
    probeSuspects(view);
    status("Live: redrawn every " + POLL_MS / 1000 + " s from " + api +
      " (last " + new Date().toLocaleTimeString() + "). The tables below are as of the page's load.");
  }

  var api = document.body.getAttribute("data-api") || "/api/v1/fabric";
  function poll() {
    fetch(api, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.json();
      })
      .then(render)
      .catch(function (e) { status("Not updated: " + e.message + "; retrying."); })
      .then(function () { setTimeout(poll, POLL_MS); });
  }
  poll();
})();
