// The site's one script: draws the charts a page's JSON block describes. Every text from a report is
// escaped before Plotly sees it (Plotly reads a small HTML-like markup in labels), and nothing here
// fetches anything: the data is in the page, the library beside it.
(function () {
  "use strict";
  function esc(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
  }
  function hover(lines) {
    return lines.map(esc).join("<br>");
  }
  var block = document.getElementById("page-data");
  var data = block ? JSON.parse(block.textContent) : { charts: [] };
  (data.charts || []).forEach(function (chart) {
    var element = document.getElementById(chart.id);
    if (!element) { return; }
    var traces = chart.traces.map(function (s) {
      var trace = {
        name: esc(s.name), x: s.x, y: s.y, customdata: s.links,
        hovertext: s.hover.map(hover), hoverinfo: "text",
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
    element.on("plotly_click", function (event) {
      var point = event.points && event.points[0];
      if (point && point.customdata) { window.location.href = point.customdata; }
    });
  });
})();
