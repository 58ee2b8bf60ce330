#include "app/logger.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace rcsim {

void install_logger() {
  static const auto logger = [] {
    auto l = spdlog::stderr_color_mt("rcsim");
    l->set_pattern("rcsim: %^%l%$: %v");
    spdlog::set_default_logger(l);
    return l;
  }();
  (void)logger;
}

}  // namespace rcsim
