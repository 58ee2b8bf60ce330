# Writes the text file IN into the C++ source OUT as `const char NAME[]` in namespace rcsim (a raw
# string literal): the opencl platform's kernels (platform_opencl.cl) travel inside the binary.
#   cmake -DIN=file.cl -DOUT=file.cpp -DNAME=kSource -P embed_text.cmake
file(READ "${IN}" text)
if(text MATCHES "\\)rcsim_embedded\"")
  message(FATAL_ERROR "${IN} contains the raw string's end marker )rcsim_embedded\"")
endif()
get_filename_component(name "${IN}" NAME)
set(body "// Generated from ${name} by embed_text.cmake at build time: edit ${name}, not this file.\n")
string(APPEND body "namespace rcsim {\nextern const char ${NAME}[];\n")
string(APPEND body "const char ${NAME}[] = R\"rcsim_embedded(${text})rcsim_embedded\";\n}  // namespace rcsim\n")
file(WRITE "${OUT}.tmp" "${body}")
file(RENAME "${OUT}.tmp" "${OUT}")
