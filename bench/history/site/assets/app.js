// The site's one script: draws the charts a page's JSON block describes. Nothing here fetches
// anything: the data is in the page, the library beside it. Plotly reads a small HTML-like markup in
// its labels, so a report's text never goes into one as markup: trace names are escaped (&, <, >, the
// entities Plotly turns back into characters), and a point's facts show in the page's own facts panel
// through textContent, while Plotly's hover label shows only the numbers.
(function () {
  "use strict";
  function esc(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }
  var block = document.getElementById("page-data");
  var data = block ? JSON.parse(block.textContent) : { charts: [] };
  (data.charts || []).forEach(function (chart) {
    var element = document.getElementById(chart.id);
    if (!element) { return; }
    var traces = chart.traces.map(function (s) {
      var trace = {
        name: esc(s.name), x: s.x, y: s.y, customdata: s.links,
        hovertemplate: chart.kind === "bar" ? "%{y:.3f}x<extra></extra>" : "%{y:.3f} µs<extra></extra>",
      };
      if (chart.kind === "bar") {
        trace.type = "bar";
      } else {
        trace.type = "scatter"; trace.mode = "lines+markers"; trace.marker = { size: 8 };
        if (s.lo && s.hi) {
          trace.error_y = {
            type: "data", symmetric: false, visible: true,
            array: s.hi.map(function (h, i) { return h === null ? 0 : h - s.y[i]; }),
            arrayminus: s.lo.map(function (l, i) { return l === null ? 0 : s.y[i] - l; }),
          };
        }
      }
      return trace;
    });
    var layout = {
      margin: { t: 30, r: 10, b: 60, l: 70 }, hovermode: "closest", showlegend: true,
      legend: { orientation: "h", y: -0.25 }, yaxis: { title: { text: esc(chart.ytitle || "") } },
      xaxis: { title: { text: esc(chart.xtitle || "") }, type: chart.xtype || "-" },
    };
    Plotly.newPlot(element, traces, layout, { displaylogo: false, responsive: true, staticPlot: false })
      .then(function () { element.setAttribute("data-drawn", "1"); });
    var facts = document.getElementById(chart.id + "-facts");
    element.on("plotly_hover", function (event) {
      var point = event.points && event.points[0];
      if (facts && point) {
        facts.textContent = chart.traces[point.curveNumber].hover[point.pointIndex].join("\n");
        facts.setAttribute("data-link", point.customdata || "");
      }
    });
    element.on("plotly_click", function (event) {
      var point = event.points && event.points[0];
      if (point && point.customdata) { window.location.href = point.customdata; }
    });
  });
})();
