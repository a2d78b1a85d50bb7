//! Line charts as inline SVG (plotters' SVG backend): time on the x axis, one line per series,
//! a legend. Text is laid out by the browser, so nothing here needs a font.

use plotters::prelude::*;

/// One line of a chart.
#[derive(Clone, Debug)]
pub struct Series {
    /// The legend's label.
    pub name: String,
    /// Its colour's index in the charts' palette (wrapping).
    pub color: usize,
    /// Points `(seconds from the start, value)`, in time order.
    pub points: Vec<(f64, f64)>,
}

/// Colours that stay apart for the colour-blind (Okabe–Ito), then black for the offered load.
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(240, 228, 66),
    RGBColor(60, 60, 60),
];

/// The colour index of the offered load (dark grey).
pub const OFFERED: usize = 7;

/// A chart's size in pixels.
const SIZE: (u32, u32) = (960, 340);

/// Why a chart could not be drawn (plotters' reason, as text).
#[derive(Debug, thiserror::Error)]
#[error("cannot draw the chart `{title}`: {reason}")]
pub struct ChartError {
    title: String,
    reason: String,
}

/// Draws `series` over `0..x_max` seconds; the y axis runs from `y_min` (or 0) to a little
/// above the largest value. Returns the `<svg>` element.
pub fn line_chart(
    title: &str,
    y_label: &str,
    x_max: f64,
    y_min: Option<f64>,
    series: &[Series],
) -> Result<String, ChartError> {
    let fail = |e: &dyn std::fmt::Display| ChartError {
        title: title.to_string(),
        reason: e.to_string(),
    };
    let values = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let top = values.clone().fold(0.0f64, f64::max);
    let bottom = y_min.unwrap_or(0.0).min(values.fold(0.0f64, f64::min));
    let y_max = if top > bottom {
        top * 1.08
    } else {
        bottom + 1.0
    };
    let x_max = if x_max > 0.0 { x_max } else { 1.0 };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| fail(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..x_max, bottom..y_max)
            .map_err(|e| fail(&e))?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc(y_label)
            .light_line_style(RGBColor(236, 236, 236))
            .draw()
            .map_err(|e| fail(&e))?;
        for s in series {
            let color = PALETTE[s.color % PALETTE.len()];
            let width = if s.color == OFFERED { 3 } else { 2 };
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    color.stroke_width(width),
                ))
                .map_err(|e| fail(&e))?
                .label(s.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(width))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()
            .map_err(|e| fail(&e))?;
        root.present().map_err(|e| fail(&e))?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_one_line_per_series_with_its_legend() {
        let series = [
            Series {
                name: "offered".into(),
                color: OFFERED,
                points: vec![(0.0, 10.0), (1.0, 20.0)],
            },
            Series {
                name: "a <b> & c".into(),
                color: 0,
                points: vec![(0.0, 5.0), (1.0, 5.0)],
            },
        ];
        let svg = line_chart("Admitted", "requests/s", 1.0, None, &series).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        // Each series: its line and its legend mark, in its colour.
        let lines = |colour: &str| {
            svg.split("<polyline")
                .filter(|p| p.split('>').next().unwrap_or("").contains(colour))
                .count()
        };
        assert_eq!(lines("#0072B2"), 2, "{svg}");
        assert_eq!(lines("#3C3C3C"), 2);
        assert!(svg.contains("a &lt;b&gt; &amp; c"));
        assert!(svg.contains("time (s)") && svg.contains("requests/s"));
    }

    #[test]
    fn an_empty_chart_still_has_axes() {
        let svg = line_chart("Nothing", "requests/s", 0.0, None, &[]).unwrap();
        assert!(svg.contains("Nothing"));
    }
}
