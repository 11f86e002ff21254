// Crossover detection and the sweep's writers (table, CSV, JSON, SVG).
#include "sweep_report.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "svg_plot.h"

namespace tapegrad::bench {

std::optional<double> SweepPoint::speedup() const {
  if (!gpu || gpu->median_ms <= 0) return std::nullopt;
  return cpu.median_ms / gpu->median_ms;
}

std::string Crossover::describe() const {
  char buf[160];
  switch (kind) {
    case Kind::NoGpuData:
      return "no GPU measurements";
    case Kind::Never:
      return "the GPU never wins in this range";
    case Kind::FromSmallest:
      std::snprintf(buf, sizeof buf, "the GPU wins from the smallest batch (%lld)",
                    static_cast<long long>(first_winning_batch));
      return buf;
    case Kind::At:
      std::snprintf(buf, sizeof buf, "the GPU wins from batch %lld (speed-up crosses 1 near batch %.0f)",
                    static_cast<long long>(first_winning_batch), interpolated_batch);
      return buf;
  }
  return "";
}

Crossover find_crossover(const CurveResult& result) {
  std::vector<std::pair<double, double>> measured;  // (batch, speed-up) where the GPU ran
  for (const SweepPoint& p : result.points)
    if (auto s = p.speedup()) measured.emplace_back(static_cast<double>(p.batch), *s);
  Crossover c;
  if (measured.empty()) return c;
  // Walk back from the largest batch while the GPU keeps winning.
  size_t first = measured.size();
  while (first > 0 && measured[first - 1].second >= 1.0) --first;
  if (first == measured.size()) {
    c.kind = Crossover::Kind::Never;
    return c;
  }
  c.first_winning_batch = static_cast<int64_t>(measured[first].first);
  if (first == 0) {
    c.kind = Crossover::Kind::FromSmallest;
    c.interpolated_batch = measured[0].first;
    return c;
  }
  c.kind = Crossover::Kind::At;
  auto [b0, s0] = measured[first - 1];
  auto [b1, s1] = measured[first];
  double f = (0 - std::log(s0)) / (std::log(s1) - std::log(s0));  // s0 < 1 <= s1, so f in (0, 1]
  c.interpolated_batch = std::exp(std::log(b0) + f * (std::log(b1) - std::log(b0)));
  return c;
}

namespace {

std::string ms_or(const std::optional<double>& v, const char* missing = "-") {
  if (!v) return missing;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", *v);
  return buf;
}

std::optional<double> gpu_ms(const SweepPoint& p) {
  return p.gpu ? std::optional<double>(p.gpu->median_ms) : std::nullopt;
}

}  // namespace

std::string format_table(const SweepReport& report) {
  std::ostringstream out;
  char line[256];
  for (const CurveResult& r : report.curves) {
    out << "\n" << r.curve.name << "  (" << r.curve.shape.describe() << ")\n";
    if (report.gpu_found) {
      std::snprintf(line, sizeof line, "%7s %11s %11s %9s %12s %12s %12s\n", "batch", "cpu ms", "gpu ms", "speed-up",
                    "cpu ex/s", "h2d page ms", "h2d pin ms");
    } else {
      std::snprintf(line, sizeof line, "%7s %11s %12s %10s\n", "batch", "cpu ms", "cpu ex/s", "GFLOP/s");
    }
    out << line;
    for (const SweepPoint& p : r.points) {
      double examples_per_s = 1e3 * static_cast<double>(p.batch) / p.cpu.median_ms;
      if (report.gpu_found) {
        auto s = p.speedup();
        char speed[32] = "-";
        if (s) std::snprintf(speed, sizeof speed, "%.2fx", *s);
        std::snprintf(line, sizeof line, "%7lld %11.3f %11s %9s %12.0f %12s %12s", static_cast<long long>(p.batch),
                      p.cpu.median_ms, ms_or(gpu_ms(p)).c_str(), speed, examples_per_s,
                      ms_or(p.copy_pageable_ms).c_str(), ms_or(p.copy_pinned_ms).c_str());
        out << line;
        if (!p.gpu_error.empty()) out << "  gpu failed: " << p.gpu_error;
        out << "\n";
      } else {
        double gflops = r.curve.shape.gemm_flops_per_example() * static_cast<double>(p.batch) / (p.cpu.median_ms * 1e6);
        std::snprintf(line, sizeof line, "%7lld %11.3f %12.0f %10.1f\n", static_cast<long long>(p.batch),
                      p.cpu.median_ms, examples_per_s, gflops);
        out << line;
      }
    }
    if (report.gpu_found) out << "crossover: " << find_crossover(r).describe() << "\n";
  }
  return out.str();
}

void write_csv(const SweepReport& report, const std::string& path) {
  std::ofstream out(path);
  TG_CHECK(out.good(), "sweep: cannot write ", path);
  out << "curve,model,kind,input,hidden,seq_len,batch,cpu_ms,cpu_steps,gpu_ms,gpu_steps,speedup,"
         "h2d_pageable_ms,h2d_pinned_ms,batch_bytes,gpu_error\n";
  for (const CurveResult& r : report.curves) {
    const ModelShape& s = r.curve.shape;
    const bool recurrent = s.kind != ModelKind::Mlp;  // LSTM and CharLm: input_size, hidden_size, seq_len
    int64_t input = recurrent ? s.input_size : s.mlp_sizes.front();
    int64_t hidden = recurrent ? s.hidden_size : s.mlp_sizes[1];
    const char* kind = s.kind == ModelKind::CharLm ? "char_lm" : recurrent ? "lstm" : "mlp";
    for (const SweepPoint& p : r.points) {
      auto s_up = p.speedup();
      out << r.curve.name << "," << s.describe() << "," << kind << "," << input << "," << hidden << ","
          << (recurrent ? s.seq_len : 0) << "," << p.batch << "," << p.cpu.median_ms << "," << p.cpu.steps << ","
          << (p.gpu ? std::to_string(p.gpu->median_ms) : "") << "," << (p.gpu ? std::to_string(p.gpu->steps) : "")
          << "," << (s_up ? std::to_string(*s_up) : "") << ","
          << (p.copy_pageable_ms ? std::to_string(*p.copy_pageable_ms) : "") << ","
          << (p.copy_pinned_ms ? std::to_string(*p.copy_pinned_ms) : "") << "," << p.batch_bytes << ",\"" << p.gpu_error
          << "\"\n";
    }
  }
}

void write_json(const SweepReport& report, const std::string& path) {
  using nlohmann::json;
  json doc;
  doc["system"] = {{"cpu", report.system.cpu_model},
                   {"logical_cpus", report.system.logical_cpus},
                   {"blas", report.system.blas},
                   {"mapped_blas", report.system.loaded_blas},
                   {"threads", report.system.threads},
                   {"omp_env", report.system.omp_env},
                   {"cuda_devices", report.system.cuda_devices}};
  doc["gpu_found"] = report.gpu_found;
  doc["quick"] = report.quick;
  doc["timing"] =
      "median over blocks of whole training steps (forward, loss, backward, Adam), data on the device, "
      "each block closed by a device synchronise; steady clock on both devices";
  for (const CurveResult& r : report.curves) {
    json curve = {{"name", r.curve.name}, {"model", r.curve.shape.describe()}};
    for (const SweepPoint& p : r.points) {
      json point = {{"batch", p.batch},
                    {"cpu_ms", p.cpu.median_ms},
                    {"cpu_min_ms", p.cpu.min_ms},
                    {"cpu_steps", p.cpu.steps},
                    {"batch_bytes", p.batch_bytes}};
      if (p.gpu)
        point["gpu_ms"] = p.gpu->median_ms, point["gpu_min_ms"] = p.gpu->min_ms, point["gpu_steps"] = p.gpu->steps;
      if (auto s = p.speedup()) point["speedup"] = *s;
      if (p.copy_pageable_ms) point["h2d_pageable_ms"] = *p.copy_pageable_ms;
      if (p.copy_pinned_ms) point["h2d_pinned_ms"] = *p.copy_pinned_ms;
      if (!p.gpu_error.empty()) point["gpu_error"] = p.gpu_error;
      curve["points"].push_back(point);
    }
    if (report.gpu_found) {
      Crossover c = find_crossover(r);
      curve["crossover"] = {{"text", c.describe()}};
      if (c.kind == Crossover::Kind::At || c.kind == Crossover::Kind::FromSmallest) {
        curve["crossover"]["first_winning_batch"] = c.first_winning_batch;
        curve["crossover"]["interpolated_batch"] = c.interpolated_batch;
      }
    }
    doc["curves"].push_back(curve);
  }
  std::ofstream out(path);
  TG_CHECK(out.good(), "sweep: cannot write ", path);
  out << doc.dump(2) << "\n";
}

void write_plot(const SweepReport& report, const std::string& path) {
  LinePlot plot;
  plot.x_label = "batch size";
  if (report.gpu_found) {
    plot.title = "GPU over CPU speed-up per training step (dashed verticals: crossover)";
    plot.y_label = "speed-up (CPU time / GPU time)";
    plot.reference_y = 1.0;
    plot.reference_label = "1x: above this line the GPU is faster";
  } else {
    plot.title = "CPU only (no GPU found): training examples per second";
    plot.y_label = "examples / s";
  }
  for (const CurveResult& r : report.curves) {
    PlotSeries series;
    series.label = r.curve.name;
    for (const SweepPoint& p : r.points) {
      double x = static_cast<double>(p.batch);
      if (report.gpu_found) {
        if (auto s = p.speedup()) series.points.emplace_back(x, *s);
      } else {
        series.points.emplace_back(x, 1e3 * x / p.cpu.median_ms);
      }
    }
    if (report.gpu_found) {
      Crossover c = find_crossover(r);
      if (c.kind == Crossover::Kind::At || c.kind == Crossover::Kind::FromSmallest) {
        series.marker_x = c.interpolated_batch;
        char label[64];
        std::snprintf(label, sizeof label, "%s: crossover ~%.0f", r.curve.name.c_str(), c.interpolated_batch);
        series.marker_label = label;
      }
    }
    plot.series.push_back(std::move(series));
  }
  std::ofstream out(path);
  TG_CHECK(out.good(), "sweep: cannot write ", path);
  out << render_svg(plot);
}

}  // namespace tapegrad::bench
