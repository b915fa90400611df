//! vLLM 0.34 metric families, recorder and exposition (see ARCHITECTURE.md).
