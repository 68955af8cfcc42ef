// The usage page's charts: stacked bars per day and group (Chart.js, vendored), from the
// JSON the page embeds (#usage-data; built by usage/selectors.py).
(function () {
  "use strict";
  var node = document.getElementById("usage-data");
  if (!node || typeof Chart === "undefined") return;
  var data = JSON.parse(node.textContent);
  var palette = ["#2563eb", "#16a34a", "#d97706", "#dc2626", "#7c3aed", "#0891b2", "#db2777", "#65a30d"];

  function chart(id, key) {
    var canvas = document.getElementById(id);
    if (!canvas) return;
    canvas.chart = new Chart(canvas, {
      type: "bar",
      data: {
        labels: data.days,
        datasets: data.series.map(function (s, n) {
          return {label: s.label, data: s[key], backgroundColor: palette[n % palette.length]};
        }),
      },
      options: {
        animation: false,
        responsive: true,
        scales: {x: {stacked: true}, y: {stacked: true, beginAtZero: true}},
        plugins: {legend: {position: "bottom"}},
      },
    });
  }
  chart("chart-tokens", "tokens");
  chart("chart-cost", "cost");
})();
