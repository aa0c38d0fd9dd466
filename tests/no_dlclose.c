/* Preloaded by scripts/test.sh --sanitize: dlclose does nothing, so the MPI components
   OpenMPI unloads at MPI_Finalize stay mapped and LeakSanitizer can name the frames of
   the memory they keep until exit (then matched by tests/sanitizer.supp) instead of
   printing "<unknown module>". lct itself never calls dlclose. */
int dlclose(void* handle) {
  (void)handle;
  return 0;
}
