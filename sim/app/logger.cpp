#include "app/logger.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "app/printable_sink.hpp"

namespace rcsim {

void install_logger() {
  static const auto logger = [] {
    // Every line escaped (control characters, invalid UTF-8) before it reaches the terminal.
    auto l = std::make_shared<spdlog::logger>(
        "rcsim", std::make_shared<PrintableSink>(std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
    spdlog::register_logger(l);
    l->set_pattern("rcsim: %^%l%$: %v");
    spdlog::set_default_logger(l);
    return l;
  }();
  (void)logger;
}

}  // namespace rcsim
